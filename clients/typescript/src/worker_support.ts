/**
 * What the Worker keeps for each running task, and the small helpers its loops share: an
 * error in plain words, a bounded wait, the failure log line, the Fail request for a failed
 * attempt (taskbroker/testing uses it too) and an abortable sleep.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import type { TaskContext } from "./context.js";
import { cooldownMessage, PermanentError, RetryableError } from "./errors.js";
import type { Logger } from "./worker_options.js";

/** One task the worker runs. */
export interface Running {
  ctx: TaskContext;
  done: Promise<void>;
  /** The handler has returned. */
  returned: boolean;
  /** The lease was lost (logged once); nothing more is sent for the task. */
  lost: boolean;
  /** Handed back at stop while its handler still ran: its result is discarded. */
  handedBack: boolean;
  /** Ends the local-clock watch of the lease. */
  stopWatch: () => void;
  /** When the task started here (performance.now()). */
  startedAt: number;
}

/** An error in plain words: a gRPC code and its message, or the error's message. */
export function plain(err: unknown): string {
  if (err instanceof ConnectError) {
    const cause = err.cause instanceof Error ? ` (${err.cause.message})` : "";
    return `${Code[err.code]}: ${err.rawMessage}${cause}`;
  }
  return err instanceof Error ? err.message : String(err);
}

/** True when `p` settles within `ms`. */
export async function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  try {
    return await Promise.race([p.then(() => true), timedOut]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Logs a failed attempt (docs/client-spec.md, point 11, Logging): a RetryableError or
 * PermanentError the handler threw (a payload that does not decode is one) at WARN in one
 * line without a stack, saying whether the task will be retried or goes DEAD (a
 * PermanentError, or the last of maxAttempts); anything else it threw, unexpected, at ERROR
 * with its stack; a result it returned that cannot be stored (`thrown` false) at ERROR, one
 * line naming the type.
 */
export function logFailure(log: Logger, ctx: TaskContext, error: unknown, thrown: boolean): void {
  const prefix = `taskbroker worker: task ${ctx.taskId}`;
  const message = error instanceof Error ? error.message : String(error);
  const { attempt, maxAttempts } = ctx.task;
  if (!thrown) {
    log.error(`${prefix}: ${message}`);
  } else if (error instanceof PermanentError) {
    log.warn(`${prefix}: failed permanently, the task goes DEAD: ${message}`);
  } else if (!(error instanceof RetryableError)) {
    const name = error instanceof Error ? error.name : typeof error;
    const stack = error instanceof Error && error.stack ? `\n${error.stack}` : "";
    log.error(`${prefix}: handler threw ${name}: ${message}${stack}`);
  } else if (maxAttempts > 0 && attempt >= maxAttempts) {
    log.warn(`${prefix}: attempt ${attempt} of ${maxAttempts} failed, the task goes DEAD: ${message}`);
  } else {
    log.warn(`${prefix}: attempt ${attempt} of ${maxAttempts} failed, the task will be retried: ${message}`);
  }
}

/** The Fail the worker sends for an attempt that ended with `error` (taskbroker/testing uses it too). */
export function failRequest(ctx: TaskContext, error: unknown) {
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
    cooldown: error instanceof RetryableError ? cooldownMessage(error.cooldown) : undefined,
  };
}

/** Resolves after `ms`, or at once when `signal` is (or becomes) aborted. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
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
