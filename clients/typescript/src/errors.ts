/**
 * What a task handler throws to steer the broker's retry policy, and why a task's
 * AbortSignal fired. Pure types: no I/O.
 */

import type { Task } from "./gen/taskbroker/v1/admin_pb.js";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { CooldownScope, TaskState } from "./gen/taskbroker/v1/broker_pb.js";

/** The one base class of this package's errors (gRPC failures stay ConnectError). */
export class TaskbrokerError extends Error {}

/**
 * The worker stopped by itself: the broker refused its Lease with a code retrying cannot fix
 * (UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT, UNIMPLEMENTED). `cause` is the
 * ConnectError; `run()` rejects with this.
 */
export class WorkerStoppedError extends TaskbrokerError {
  readonly code: number;
  constructor(message: string, code: number, cause: unknown) {
    super(message, { cause });
    this.name = "WorkerStoppedError";
    this.code = code;
  }
}

/**
 * What a failed attempt asks the broker to hold (FailRequest.cooldown): the task's own
 * concurrency key (in its queue) or its limit bucket, for `durationMs`, on every replica.
 */
export interface RequestedCooldown {
  scope: "CONCURRENCY_KEY" | "BUCKET";
  durationMs: number;
}

/**
 * The attempt failed but may succeed later: the worker reports Fail and the broker
 * applies the task's retry policy. Any other thrown error is treated the same way.
 */
export class RetryableError extends TaskbrokerError {
  /** Overrides the retry policy's backoff for this retry, in milliseconds. */
  readonly retryAfterMs: number | undefined;
  /**
   * Asks the broker to keep the retry for this worker (its local files are here):
   * FailRequest.prefer_same_worker, SOFT unless the task's sticky policy is HARD.
   */
  readonly preferSameWorker: boolean;
  /**
   * The cooldown asked for by `coolDownKeyMs` or `coolDownBucketMs`: no task of the key (or
   * bucket) is leased before it ends, and this task's retry waits at least as long. The broker
   * refuses it (INVALID_ARGUMENT, the Fail not applied) when the task has no key (or bucket)
   * or the duration is above its max_cooldown (1 h by default).
   */
  readonly cooldown: RequestedCooldown | undefined;

  constructor(
    message: string,
    options: {
      retryAfterMs?: number;
      preferSameWorker?: boolean;
      /** Holds every task of this task's concurrency key this many ms (e.g. a 429's Retry-After). */
      coolDownKeyMs?: number;
      /** Holds every task of this task's limit bucket this many ms. */
      coolDownBucketMs?: number;
      cause?: unknown;
    } = {},
  ) {
    super(message, { cause: options.cause });
    this.name = "RetryableError";
    this.retryAfterMs = options.retryAfterMs;
    this.preferSameWorker = options.preferSameWorker ?? false;
    const { coolDownKeyMs: key, coolDownBucketMs: bucket } = options;
    if (key !== undefined && bucket !== undefined) {
      throw new RangeError("RetryableError: give coolDownKeyMs or coolDownBucketMs, not both");
    }
    const ms = key ?? bucket;
    if (ms !== undefined && !(Number.isFinite(ms) && ms > 0)) {
      throw new RangeError(`RetryableError: a cooldown must be above 0 ms, got ${ms}`);
    }
    this.cooldown = ms === undefined ? undefined : { scope: key !== undefined ? "CONCURRENCY_KEY" : "BUCKET", durationMs: ms };
  }
}

/** The FailRequest.cooldown of a cooldown asked for (whole milliseconds), or undefined. */
export function cooldownMessage(c: RequestedCooldown | undefined): { scope: CooldownScope; duration: ReturnType<typeof durationFromMs> } | undefined {
  return c === undefined ? undefined : { scope: CooldownScope[c.scope], duration: durationFromMs(Math.ceil(c.durationMs)) };
}

/** The task can never succeed (bad input): reported as Fail with non_retryable, the task goes DEAD. */
export class PermanentError extends TaskbrokerError {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.name = "PermanentError";
  }
}

/**
 * Why a task's work should stop:
 * - `lost`: the lease is no longer held (expired, reclaimed); nothing will be reported.
 * - `cancelled`: an operator cancelled the task; stop and throw, the worker reports Fail.
 * - `stopping`: the worker is stopping hard after its drain timeout.
 * - `deadline`: the task's deadline passed; the broker will not accept the work.
 */
export type AbortKind = "lost" | "cancelled" | "stopping" | "deadline";

/** The `reason` of an aborted task signal. */
export class TaskAbortedError extends TaskbrokerError {
  readonly kind: AbortKind;

  constructor(kind: AbortKind, taskId: string) {
    super(`task ${taskId}: ${describe(kind)}`);
    this.name = "TaskAbortedError";
    this.kind = kind;
  }
}

function describe(kind: AbortKind): string {
  switch (kind) {
    case "lost":
      return "lease lost";
    case "cancelled":
      return "cancel requested";
    case "stopping":
      return "worker stopping";
    case "deadline":
      return "deadline passed";
  }
}

/**
 * A waited-for task ended DEAD or CANCELLED (`wait`, `submitAndWait`, `Taskbroker.getResult`):
 * its id, its final state and its last error (the message of its last failed attempt, or "").
 * `task` is the task as read.
 *
 *     try { await submitAndWait(tb, spec); }
 *     catch (e) { if (e instanceof TaskFailedError) console.warn(e.taskId, TaskState[e.state], e.lastError); }
 */
export class TaskFailedError extends TaskbrokerError {
  readonly taskId: string;
  readonly state: TaskState;
  readonly lastError: string;
  readonly task: Task;
  constructor(task: Task) {
    const why = task.lastError ? `: ${task.lastError}` : "";
    super(`task ${task.id} ended ${TaskState[task.state]}${why}`);
    this.name = "TaskFailedError";
    this.taskId = task.id;
    this.state = task.state;
    this.lastError = task.lastError;
    this.task = task;
  }
}

/** The task itself, unless it ended DEAD or CANCELLED: then a TaskFailedError is thrown. */
export function throwIfFailed(task: Task): Task {
  if (task.state === TaskState.DEAD || task.state === TaskState.CANCELLED) throw new TaskFailedError(task);
  return task;
}
