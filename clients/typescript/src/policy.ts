/**
 * Policy declared with a handler (docs/client-spec.md point 20), and `defineTask`.
 *
 * `worker.handle("emails", send, { policy: { maxAttempts: 5, backoffMs: 10_000,
 * nonRetryable: [InvalidAddress], concurrency: 2 } })`: the retry fields fill what a task's own
 * retry leaves unset when it is submitted through the same Client (the spec's own retry wins,
 * then the handler's, then the broker's `[queues.NAME] retry`, then its `[retry]`); an error
 * of a `nonRetryable` class (or with one among its causes) fails the attempt for good; and
 * `concurrency` caps how many of the queue's tasks this worker runs at once.
 */
import type { MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";

import type { Client, SubmitOptions } from "./client.js";
import { PermanentError } from "./errors.js";
import type { RetryPolicySchema, SubmitResult, TaskSpecSchema } from "./gen/taskbroker/v1/broker_pb.js";
import { decodeResult } from "./serializer.js";
import { wait, type WaitOptions } from "./wait.js";

type RetryInit = MessageInitShape<typeof RetryPolicySchema>;
type TaskSpecInit = MessageInitShape<typeof TaskSpecSchema>;
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type ErrorClass = abstract new (...args: any[]) => Error;

/** A queue's policy; each field unset unless given. */
export interface QueuePolicy {
  /** Total attempts allowed, counting the first. */
  maxAttempts?: number;
  /** Backoff before the second attempt (0 retries at once). */
  backoffMs?: number;
  /** Factor applied to the backoff after each failure, at least 1. */
  backoffMultiplier?: number;
  /** Upper bound of the backoff. */
  maxBackoffMs?: number;
  /** Error classes (and their subclasses) that fail the attempt without retry. */
  nonRetryable?: ErrorClass[];
  /** How many of the queue's tasks this worker runs at once, at least 1. */
  concurrency?: number;
}

/** The policy's retry defaults, or undefined when it sets none. */
export function retryOf(p: QueuePolicy): RetryInit | undefined {
  const r: RetryInit = {};
  if (p.maxAttempts) r.maxAttempts = p.maxAttempts;
  if (p.backoffMultiplier) r.backoffMultiplier = p.backoffMultiplier;
  if (p.backoffMs !== undefined) r.initialBackoff = durationFromMs(p.backoffMs);
  if (p.maxBackoffMs !== undefined) r.maxBackoff = durationFromMs(p.maxBackoffMs);
  return Object.keys(r).length === 0 ? undefined : r;
}

/** `own`'s fields, and `defaults`' where `own` leaves one unset. */
export function mergeRetry(own: RetryInit | undefined, defaults: RetryInit): RetryInit {
  const { $typeName: _message, ...fields } = (own ?? {}) as RetryInit & { $typeName?: string };
  const r = fields as RetryInit;
  if (!r.maxAttempts) r.maxAttempts = defaults.maxAttempts ?? 0;
  if (!r.backoffMultiplier) r.backoffMultiplier = defaults.backoffMultiplier ?? 0;
  if (r.initialBackoff === undefined && defaults.initialBackoff !== undefined) r.initialBackoff = defaults.initialBackoff;
  if (r.maxBackoff === undefined && defaults.maxBackoff !== undefined) r.maxBackoff = defaults.maxBackoff;
  if (r.jitter === undefined && defaults.jitter !== undefined) r.jitter = defaults.jitter;
  return r;
}

/** `tasks`, each with its queue's retry defaults filled in (copies; the caller's stay). */
export function applyRetryDefaults(table: ReadonlyMap<string, RetryInit>, tasks: TaskSpecInit[]): TaskSpecInit[] {
  if (table.size === 0) return tasks;
  return tasks.map((t) => {
    const d = table.get(t.queue ?? "");
    if (!d) return t;
    const { $typeName: _message, ...fields } = t as TaskSpecInit & { $typeName?: string };
    return { ...fields, retry: mergeRetry(t.retry, d) } as TaskSpecInit;
  });
}

/** `error`, as a PermanentError (its cause) when it or one of its causes is non-retryable. */
export function classify(p: QueuePolicy | undefined, error: unknown): unknown {
  const types = p?.nonRetryable ?? [];
  if (types.length === 0 || error instanceof PermanentError) return error;
  const seen = new Set<unknown>();
  for (let e: unknown = error; e instanceof Error && !seen.has(e); e = e.cause) {
    seen.add(e);
    if (types.some((t) => e instanceof t)) {
      const first = error as Error;
      return new PermanentError(`${first.name}: ${first.message}`, { cause: error });
    }
  }
  return error;
}

/**
 * The queues a Lease may ask for and its maxTasks: full queues (their own `concurrency`) are
 * left out and the batch is no larger than the smallest free count of a limited queue asked for.
 */
export function leasePlan(
  queues: readonly string[],
  limits: ReadonlyMap<string, number>,
  running: ReadonlyMap<string, number>,
  free: number,
): { queues: string[]; maxTasks: number } {
  if (limits.size === 0) return { queues: [...queues], maxTasks: free };
  const asked = queues.filter((q) => !limits.has(q) || (running.get(q) ?? 0) < limits.get(q)!);
  for (const q of asked) {
    const limit = limits.get(q);
    if (limit !== undefined) free = Math.min(free, limit - (running.get(q) ?? 0));
  }
  return { queues: asked, maxTasks: asked.length === 0 ? 0 : free };
}

/** One queue's tasks, with payload type P and result type R, for producers and workers alike. */
export interface TaskDef<P, R> {
  readonly queue: string;
  readonly policy: QueuePolicy | undefined;
  /** Submits one task (options as `Client.submit`: `key`, `retry`, `delayMs`, `runAt`...). */
  submit(client: Client, payload: P, options?: SubmitOptions): Promise<SubmitResult>;
  /** Submits a task not leased before `delayMs` from now. */
  delay(client: Client, payload: P, delayMs: number, options?: SubmitOptions): Promise<SubmitResult>;
  /** Submits a task not leased before `at`. */
  runAt(client: Client, payload: P, at: Date, options?: SubmitOptions): Promise<SubmitResult>;
  /** Submits, waits and decodes the result; DEAD or CANCELLED rejects with TaskFailedError. */
  submitAndWait(client: Client, payload: P, options?: SubmitOptions & WaitOptions): Promise<R>;
  /** Marks the handler's types (for `worker.task`). */
  readonly _types?: (p: P) => R;
}

/**
 * `defineTask<Email, Sent>("emails", { maxAttempts: 5 })`: the definition's retry defaults fill
 * what each submitted task's own retry leaves unset; `worker.task(def, fn)` registers its handler
 * under the whole policy.
 */
export function defineTask<P, R>(queue: string, policy?: QueuePolicy): TaskDef<P, R> {
  const defaults = policy ? retryOf(policy) : undefined;
  const opts = (o: SubmitOptions = {}): SubmitOptions => (defaults ? { ...o, retry: mergeRetry(o.retry, defaults) } : o);
  const def: TaskDef<P, R> = {
    queue,
    policy,
    submit: (client, payload, options) => client.submit(queue, payload, opts(options)),
    delay: (client, payload, delayMs, options) => client.submit(queue, payload, { ...opts(options), delayMs }),
    runAt: (client, payload, at, options) => client.submit(queue, payload, { ...opts(options), runAt: at }),
    submitAndWait: async (client, payload, options = {}) => {
      const { timeoutMs, signal, ...submit } = options as SubmitOptions & WaitOptions;
      const { taskId } = await client.submit(queue, payload, opts(submit));
      const task = await wait(client, taskId, { ...(timeoutMs !== undefined ? { timeoutMs } : {}), ...(signal ? { signal } : {}) });
      return decodeResult<R>(task.result, client.serializer);
    },
  };
  return def;
}
