/**
 * Worker: runs a handler over tasks leased from a broker.
 *
 * - One lease loop long-polls Lease for exactly as many tasks as there are free slots.
 * - One heartbeat loop extends every running lease in a single Heartbeat call, about every
 *   third of the lease duration, and aborts a task's signal when its lease is lost or an
 *   operator asks to cancel it.
 * - A handler's result is reported with Complete; a thrown PermanentError with
 *   Fail(non_retryable); any other error with Fail, so the broker's retry policy applies.
 * - stop() (or close(), or the `signal` given to run(), or SIGTERM/SIGINT with
 *   `handleSignals`) stops leasing and drains; after its timeout it aborts the handlers' signals.
 * - A Lease refused with UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT or UNIMPLEMENTED
 *   stops the worker: run() rejects with WorkerStoppedError. Other errors are retried after a
 *   jittered backoff. A task's deadline aborts its signal (kind "deadline").
 * - With `leaseNext` (the default), a finished task's Complete or Fail also leases the next
 *   task for the slot it frees (`leaseNext` on the settle, no wait), which then runs like a
 *   leased one: two calls per task instead of three. When none comes back, the long-poll Lease
 *   goes on. Never asked for while stopping. `leaseNext: false` turns it off.
 *
 * Defaults follow docs/client-spec.md (see DEFAULTS in spec.ts).
 */
import { hostname } from "node:os";
import { Code, ConnectError } from "@connectrpc/connect";
import { durationFromMs, timestampDate } from "@bufbuild/protobuf/wkt";
import type { LeasedTask } from "./gen/taskbroker/v1/broker_pb.js";
import { isLeaseLost, type BrokerClient } from "./client.js";
import { TaskContext, toBytes, type BytesLike } from "./context.js";
import { PermanentError, RetryableError, WorkerStoppedError } from "./errors.js";
import { backoffMs, DEFAULTS, heartbeatIntervalMs, stopsWorker } from "./spec.js";
import { MAX_LABELS } from "./routing.js";
import { withContext } from "./tracing.js";

/** Does the work of one task. Resolve (optionally with a result) to complete it; throw to fail it. */
export type Handler = (ctx: TaskContext) => Promise<BytesLike | void>;

export interface WorkerOptions {
  /** Queues to lease from, at least one. */
  queues: string[];
  /** Shown in the broker's attempts and admin views. Default `<hostname>-<pid>`. */
  workerId?: string;
  /** Tasks run at once, 1 to 256. Default 4. */
  concurrency?: number;
  /** Lease (and heartbeat extension) length in ms. Default 30 s; the broker allows 1 s to 24 h. */
  leaseDurationMs?: number;
  /** Long-poll wait of each Lease call in ms, 0 to 60 s. Default 10 s. */
  pollWaitMs?: number;
  /** Time between heartbeats in ms. Default a third of leaseDurationMs. */
  heartbeatIntervalMs?: number;
  /** How long stop() lets running handlers finish before aborting them, in ms. Default 30 s. */
  stopTimeoutMs?: number;
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
  /** Stop on SIGTERM and SIGINT (Kubernetes, Ctrl-C) while running. Default false. */
  handleSignals?: boolean;
}

interface Running {
  ctx: TaskContext;
  done: Promise<void>;
}

export class Worker {
  readonly workerId: string;
  readonly #broker: BrokerClient;
  readonly #handler: Handler;
  readonly #queues: string[];
  readonly #concurrency: number;
  readonly #leaseDurationMs: number;
  readonly #pollWaitMs: number;
  readonly #heartbeatIntervalMs: number;
  readonly #stopTimeoutMs: number;
  readonly #onError: (err: unknown, during: string) => void;
  /** Sent with every Lease (routing). */
  readonly labels: Readonly<Record<string, string>>;
  readonly #leaseNext: boolean;
  #leaseNextTasks = 0;
  /** Set once stop() gave up waiting: a task a settle brings after that is aborted at once. */
  #stopTimedOut = false;

  readonly #running = new Map<string, Running>();
  /** Aborts the in-flight long poll and the loops' sleeps on stop(). */
  readonly #stopping = new AbortController();
  /** Ends the heartbeat loop once the last task has drained after stop(). */
  readonly #heartbeatStop = new AbortController();
  /** Resolves the lease loop's wait for a free slot. */
  #slotFreed: (() => void) | undefined;
  #runPromise: Promise<void> | undefined;
  #failure: WorkerStoppedError | undefined;

  constructor(broker: BrokerClient, handler: Handler, options: WorkerOptions) {
    if (options.queues.length === 0) {
      throw new Error("Worker needs at least one queue");
    }
    this.#broker = broker;
    this.#handler = handler;
    this.#queues = [...options.queues];
    this.workerId = options.workerId ?? `${hostname()}-${process.pid}`;
    this.#concurrency = clamp(options.concurrency ?? DEFAULTS.concurrency, 1, 256);
    this.#leaseDurationMs = Math.max(options.leaseDurationMs ?? DEFAULTS.leaseDurationMs, 1_000);
    this.#pollWaitMs = clamp(options.pollWaitMs ?? DEFAULTS.pollWaitMs, 0, 60_000);
    this.#heartbeatIntervalMs = options.heartbeatIntervalMs ?? heartbeatIntervalMs(this.#leaseDurationMs);
    this.#stopTimeoutMs = options.stopTimeoutMs ?? DEFAULTS.stopTimeoutMs;
    this.#onError = options.onError ?? ((err, during) => console.error(`taskbroker worker: ${during}:`, err));
    const labels = { ...options.labels };
    if (Object.keys(labels).length > MAX_LABELS) {
      throw new Error(`Worker labels: at most ${MAX_LABELS}, got ${Object.keys(labels).length}`);
    }
    this.labels = labels;
    this.#leaseNext = options.leaseNext ?? true;
  }

  /** How many tasks came back in a settle's nextTasks (and ran) so far. */
  get leaseNextTasks(): number {
    return this.#leaseNextTasks;
  }

  /** Tasks currently being worked on. */
  get inFlight(): number {
    return this.#running.size;
  }

  /** The settings in effect, defaults filled in. */
  get settings() {
    return {
      concurrency: this.#concurrency,
      leaseDurationMs: this.#leaseDurationMs,
      pollWaitMs: this.#pollWaitMs,
      heartbeatIntervalMs: this.#heartbeatIntervalMs,
      stopTimeoutMs: this.#stopTimeoutMs,
    };
  }

  /**
   * Leases and runs tasks until stop(), `signal` aborts or (with `handleSignals`) SIGTERM or
   * SIGINT arrives; resolves once every started task is settled. Rejects with
   * WorkerStoppedError when the broker refused the worker for good.
   */
  run(options: RunOptions = {}): Promise<void> {
    if (this.#runPromise) {
      return this.#runPromise;
    }
    const onStop = () => void this.stop().catch(() => {});
    options.signal?.addEventListener("abort", onStop, { once: true });
    if (options.signal?.aborted) onStop();
    if (options.handleSignals) {
      process.on("SIGTERM", onStop);
      process.on("SIGINT", onStop);
    }
    this.#runPromise = this.#run().finally(() => {
      options.signal?.removeEventListener("abort", onStop);
      process.off("SIGTERM", onStop);
      process.off("SIGINT", onStop);
    });
    return this.#runPromise;
  }

  /** stop() with the worker's stop timeout; resolves at once for a worker never run. */
  close(): Promise<void> {
    return this.stop();
  }

  /**
   * Stops leasing and waits for running tasks to finish. After `timeoutMs` (default the
   * worker's stopTimeoutMs) their signals are aborted (kind "stopping") and the worker waits for
   * the handlers to return. Never rejects: run() reports why a worker stopped by itself.
   */
  async stop(timeoutMs = this.#stopTimeoutMs): Promise<void> {
    this.#stopping.abort();
    this.#slotFreed?.();
    const run = (this.#runPromise ?? Promise.resolve()).catch(() => {});
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(true), timeoutMs);
    });
    const gaveUp = await Promise.race([run.then(() => false), timedOut]);
    clearTimeout(timer);
    if (gaveUp) {
      this.#stopTimedOut = true;
      for (const { ctx } of this.#running.values()) {
        ctx.abort("stopping");
      }
    }
    await run;
  }

  async #run(): Promise<void> {
    const heartbeats = this.#heartbeatLoop();
    await this.#leaseLoop();
    // Heartbeats go on while the last tasks drain, so their leases do not run out.
    while (this.#running.size > 0) {
      await Promise.all([...this.#running.values()].map((r) => r.done));
    }
    this.#heartbeatStop.abort();
    await heartbeats;
    if (this.#failure) {
      throw this.#failure;
    }
  }

  async #leaseLoop(): Promise<void> {
    const stop = this.#stopping.signal;
    let failures = 0;
    while (!stop.aborted) {
      const free = this.#concurrency - this.#running.size;
      if (free <= 0) {
        await new Promise<void>((resolve) => (this.#slotFreed = resolve));
        this.#slotFreed = undefined;
        continue;
      }
      try {
        const res = await this.#broker.lease(
          {
            workerId: this.workerId,
            queues: this.#queues,
            maxTasks: free,
            leaseDuration: durationFromMs(this.#leaseDurationMs),
            wait: durationFromMs(this.#pollWaitMs),
            labels: { ...this.labels },
          },
          // The call's deadline leaves the broker room to answer an empty long poll.
          { signal: stop, timeoutMs: this.#pollWaitMs + DEFAULTS.leaseMarginMs },
        );
        failures = 0;
        for (const task of res.tasks) {
          this.#start(task);
        }
      } catch (err) {
        if (stop.aborted) {
          break;
        }
        if (stopsWorker(err)) {
          const code = (err as ConnectError).code;
          this.#failure = new WorkerStoppedError(`lease refused: ${Code[code]}: ${(err as ConnectError).rawMessage}`, code, err);
          this.#onError(this.#failure, "lease");
          this.#stopping.abort();
          break;
        }
        this.#onError(err, "lease");
        await sleep(backoffMs(failures), stop);
        failures++;
      }
    }
  }

  #start(task: LeasedTask): void {
    const ctx = new TaskContext(this.#broker, task, this.#leaseDurationMs);
    let deadlineTimer: NodeJS.Timeout | undefined;
    if (task.deadline) {
      const ms = Math.max(timestampDate(task.deadline).getTime() - Date.now(), 0);
      deadlineTimer = setTimeout(() => ctx.abort("deadline"), ms);
    }
    if (this.#stopTimedOut) {
      ctx.abort("stopping");
    }
    const done = this.#execute(ctx)
      .catch((err: unknown) => {
        this.#onError(err, `task ${ctx.taskId}`);
        return [] as LeasedTask[];
      })
      .then((next) => {
        clearTimeout(deadlineTimer);
        // In one step: the finished task leaves and the tasks its settle leased take its
        // slot, so the lease loop never sees the slot free in between. Delete first: a
        // failed task retried at once can come back with the same id.
        this.#running.delete(task.taskId);
        for (const t of next) {
          this.#leaseNextTasks++;
          this.#start(t);
        }
        this.#slotFreed?.();
      });
    this.#running.set(task.taskId, { ctx, done });
  }

  /** The lease_next a settle carries: the freed slot's task, no wait; none when off or stopping. */
  #nextLease() {
    if (!this.#leaseNext || this.#stopping.signal.aborted) {
      return undefined;
    }
    return {
      workerId: this.workerId,
      queues: this.#queues,
      maxTasks: 1,
      leaseDuration: durationFromMs(this.#leaseDurationMs),
      labels: { ...this.labels },
    };
  }

  /** Runs the handler and settles the task; resolves with the tasks the settle leased. */
  async #execute(ctx: TaskContext): Promise<LeasedTask[]> {
    let outcome: { ok: true; result: BytesLike | void } | { ok: false; error: unknown };
    try {
      outcome = { ok: true, result: await withContext(ctx.traceContext, () => this.#handler(ctx)) };
    } catch (error) {
      outcome = { ok: false, error };
    }
    if (ctx.abortKind === "lost") {
      return []; // Another holder may have the task now; nothing of ours would be accepted.
    }
    const leaseNext = this.#nextLease();
    // Complete and Fail are idempotent for the same lease token, so a report that met a
    // transient error is sent again a few times before the lease is left to run out.
    for (let tries = 1; ; tries++) {
      try {
        if (outcome.ok) {
          const res = await this.#broker.complete({
            taskId: ctx.taskId,
            leaseToken: ctx.task.leaseToken,
            result: outcome.result === undefined ? new Uint8Array() : toBytes(outcome.result),
            leaseNext,
          });
          return res.nextTasks;
        }
        const res = await this.#broker.fail({ ...failRequest(ctx, outcome.error), leaseNext });
        return res.nextTasks;
      } catch (err) {
        if (isTransient(err) && tries < 5) {
          await new Promise((resolve) => setTimeout(resolve, backoffMs(tries - 1)));
          continue;
        }
        if (!isLeaseLost(err)) {
          this.#onError(err, `report task ${ctx.taskId}`);
        }
        return [];
      }
    }
  }

  async #heartbeatLoop(): Promise<void> {
    const stop = this.#heartbeatStop.signal;
    while (!stop.aborted) {
      await sleep(this.#heartbeatIntervalMs, stop);
      if (!stop.aborted) {
        await this.#heartbeatOnce();
      }
    }
  }

  async #heartbeatOnce(): Promise<void> {
    const live = [...this.#running.values()].map((r) => r.ctx).filter((ctx) => ctx.abortKind !== "lost");
    if (live.length === 0) {
      return;
    }
    try {
      const res = await this.#broker.heartbeat(
        {
          workerId: this.workerId,
          leases: live.map((ctx) => ({ taskId: ctx.taskId, leaseToken: ctx.task.leaseToken })),
          extendBy: durationFromMs(this.#leaseDurationMs),
        },
        { timeoutMs: Math.max(this.#heartbeatIntervalMs, 1_000) },
      );
      const byId = new Map(live.map((ctx) => [ctx.taskId, ctx]));
      for (const status of res.leases) {
        const ctx = byId.get(status.taskId);
        if (!ctx) continue;
        if (status.lost) {
          ctx.abort("lost");
        } else if (status.cancelRequested) {
          ctx.abort("cancelled");
        }
        if (status.leaseExpiresAt) {
          ctx.extendedTo(timestampDate(status.leaseExpiresAt).getTime());
        }
      }
    } catch (err) {
      this.#onError(err, "heartbeat");
      // Without a broker to confirm, a lease that ran out by our clock is gone.
      const now = Date.now();
      for (const ctx of live) {
        if (ctx.leaseExpiresAt.getTime() <= now) {
          ctx.abort("lost");
        }
      }
    }
  }
}

function failRequest(ctx: TaskContext, error: unknown) {
  const message = error instanceof Error ? error.message : String(error);
  return {
    taskId: ctx.taskId,
    leaseToken: ctx.task.leaseToken,
    errorMessage: message,
    nonRetryable: error instanceof PermanentError,
    retryAfter:
      error instanceof RetryableError && error.retryAfterMs !== undefined
        ? durationFromMs(error.retryAfterMs)
        : undefined,
    preferSameWorker: error instanceof RetryableError && error.preferSameWorker,
  };
}

/** Resolves after `ms`, or at once when `signal` is (or becomes) aborted. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) {
    return Promise.resolve();
  }
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

function clamp(n: number, lo: number, hi: number): number {
  return Math.min(Math.max(Math.floor(n), lo), hi);
}

/** True for errors a caller may retry unchanged (broker briefly unreachable). */
function isTransient(err: unknown): boolean {
  return err instanceof ConnectError && (err.code === Code.Unavailable || err.code === Code.DeadlineExceeded);
}
