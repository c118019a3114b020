/**
 * What a Worker is given: its options, run()'s options, the events it emits and the logger it
 * writes to. Types only.
 */
import type { TaskState } from "./gen/taskbroker/v1/broker_pb.js";
import type { TaskContext } from "./context.js";
import type { HandlerDefinition, Middleware, TypedHandler } from "./handlers.js";
import type { MeterProviderLike } from "./metrics.js";
import type { Serializer } from "./serializer.js";

/** Where the worker logs (docs/client-spec.md point 11, Logging). Default `console`. */
export interface Logger {
  warn(message: string): void;
  error(message: string): void;
}

export interface WorkerOptions<Data = unknown, Result = unknown> {
  /**
   * Queues to lease from: the queues of the raw handler given to the constructor, or of
   * `handler`. Not needed with `handlers` or `handle()`.
   */
  queues?: string[];
  /** One typed handler for all of `queues`. */
  handler?: TypedHandler<Data, Result> | HandlerDefinition<Data, Result>;
  /** A typed handler per queue: a function, or `handler(fn, { type, validate })`. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  handlers?: Record<string, TypedHandler<any, any> | HandlerDefinition<any, any>>;
  /** Around every handler call, the first outermost (more with `use()`). */
  middleware?: Middleware[];
  /** Decodes typed handlers' payloads and encodes their results. Default the Client's, else JSON. */
  serializer?: Serializer;
  /**
   * Stop at once (run() rejects with WorkerStoppedError, one plain line) when a Lease fails for
   * a reason of configuration that retrying cannot fix: a TLS handshake failure, plaintext to a
   * TLS port or the reverse, a certificate not trusted, a port that does not speak gRPC.
   * Without it those are retried like an unreachable broker. Default false.
   */
  failFast?: boolean;
  /** Where the metrics go. Default the global OpenTelemetry meter provider at construction. */
  meterProvider?: MeterProviderLike;
  /** Shown in the broker's attempts and admin views. Default `<hostname>-<pid>`. */
  workerId?: string;
  /** Tasks run at once, 1 to 256 (others are refused). Default 4. */
  concurrency?: number;
  /** Lease (and heartbeat extension) length in ms. Default 30 s; the broker allows 1 s to 24 h. */
  leaseDurationMs?: number;
  /** Long-poll wait of each Lease call in ms, 0 to 60 s. Default 10 s. */
  pollWaitMs?: number;
  /** Time between heartbeats in ms. Default a third of leaseDurationMs. */
  heartbeatIntervalMs?: number;
  /** How long stop() lets running handlers finish before aborting them, in ms. Default 30 s. */
  stopTimeoutMs?: number;
  /** Warnings (lost leases, retried settles, hand-backs) and errors (handler failures). Default console. */
  logger?: Logger;
  /** Called with errors the worker survives (broker unreachable, a report that failed). */
  onError?: (err: unknown, during: string) => void;
  /**
   * What this worker is (`{ gpu: "a100", region: "eu" }`), sent with every Lease: a task
   * targeted at labels goes only to a worker carrying every pair. At most 32.
   */
  labels?: Record<string, string>;
  /**
   * Let each Complete or Fail also lease the next task for the slot it frees (lease_next):
   * two calls per task instead of three. Default true.
   */
  leaseNext?: boolean;
}

export interface RunOptions {
  /** Aborting it stops the worker as stop() does; run() then resolves once drained. */
  signal?: AbortSignal;
  /**
   * Stop (drain) on SIGTERM and SIGINT (Kubernetes, Ctrl-C) while running, as the Python
   * client does. Default true; false leaves signals to the application.
   */
  handleSignals?: boolean;
}

/** What `on()` listens to. Listeners run after the broker accepted the settle; their throws go to onError. */
export interface WorkerEvents<Result = unknown> {
  /** The task's Complete was accepted; `result` is the handler's (decoded) return value. */
  completed: (ctx: TaskContext, result: Result) => void;
  /** The attempt's Fail was accepted; `state` is the task's state after it (READY/SCHEDULED: retried; DEAD; CANCELLED). */
  failed: (ctx: TaskContext, error: unknown, state: TaskState) => void;
}
