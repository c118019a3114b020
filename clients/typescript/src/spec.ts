/**
 * The numbers and rules of docs/client-spec.md that every client shares. Pure: no I/O.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { RetryInfoSchema } from "./gen/google/rpc/error_details_pb.js";

/** The defaults of spec point 1. */
export const DEFAULTS = Object.freeze({
  concurrency: 4,
  pollWaitMs: 10_000,
  leaseDurationMs: 30_000,
  stopTimeoutMs: 30_000,
  /** Deadline of every call except Lease. */
  callTimeoutMs: 10_000,
  /** Added to the poll wait to make a Lease call's deadline. */
  leaseMarginMs: 5_000,
  /** A settle is not tried again within this much of the lease's expiry (point 11). */
  settleMarginMs: 1_000,
  /** How long handlers have to return once a stop timed out and aborted them. */
  stopGraceMs: 1_000,
  /** stop() returns within its timeout + this, whatever handlers or the broker do. */
  stopMarginMs: 2_000,
  /** Deadline of a hand-back's Fail at stop. */
  handBackTimeoutMs: 1_000,
  backoffBaseMs: 200,
  backoffMaxMs: 10_000,
  /** A Submit refused with RESOURCE_EXHAUSTED and a RetryInfo is sent again at most this often (5 tries in all; spec point 18). */
  submitRetries: 4,
  /** The longest wait before one such resend (a longer hint is cut to this). */
  submitRetryMaxDelayMs: 10_000,
});

/** A third of the lease: two heartbeats may fail before a lease runs out. */
export function heartbeatIntervalMs(leaseDurationMs: number): number {
  return Math.floor(leaseDurationMs / 3);
}

/** The longest pause after `failures` failed calls in a row (0 = the first). */
export function backoffCeilingMs(failures: number): number {
  const n = Math.min(Math.max(Math.floor(failures), 0), 16);
  return Math.min(DEFAULTS.backoffMaxMs, DEFAULTS.backoffBaseMs * 2 ** n);
}

/** A random pause in [0.1, 1] x backoffCeilingMs(failures) (full jitter). */
export function backoffMs(failures: number): number {
  return backoffCeilingMs(failures) * Math.max(Math.random(), 0.1);
}

/** The codes that stop a worker (spec point 5): retrying the same Lease cannot fix them. */
export const STOP_CODES: ReadonlySet<Code> = new Set([
  Code.Unauthenticated,
  Code.PermissionDenied,
  Code.InvalidArgument,
  Code.Unimplemented,
]);

/** True when a Lease error stops the worker instead of being retried. */
export function stopsWorker(err: unknown): boolean {
  return err instanceof ConnectError && STOP_CODES.has(err.code);
}

/** The delay of the google.rpc.RetryInfo an error carries, in ms, or undefined without one. */
export function retryDelayMs(err: unknown): number | undefined {
  if (!(err instanceof ConnectError)) return undefined;
  const info = err.findDetails(RetryInfoSchema)[0];
  if (info === undefined) return undefined;
  const d = info.retryDelay;
  return d === undefined ? 0 : Number(d.seconds) * 1000 + d.nanos / 1e6;
}

/**
 * How long to wait before sending a refused Submit again after `retries` resends, or
 * undefined to throw its error: only RESOURCE_EXHAUSTED with a RetryInfo (backpressure: the
 * broker stored nothing) is resent, at most DEFAULTS.submitRetries times, each wait at most
 * DEFAULTS.submitRetryMaxDelayMs.
 */
export function submitRetryDelayMs(err: unknown, retries: number): number | undefined {
  if (retries >= DEFAULTS.submitRetries) return undefined;
  if (!(err instanceof ConnectError) || err.code !== Code.ResourceExhausted) return undefined;
  const delay = retryDelayMs(err);
  return delay === undefined ? undefined : Math.min(Math.max(delay, 0), DEFAULTS.submitRetryMaxDelayMs);
}

/** The worker settings checkWorkerOptions looks at, in milliseconds. */
export interface WorkerLimits {
  queues: readonly string[];
  concurrency: number;
  leaseDurationMs: number;
  pollWaitMs: number;
  heartbeatIntervalMs: number;
  stopTimeoutMs: number;
}

/**
 * Throws a RangeError naming the option, for worker settings the broker would refuse or that
 * cannot work (as the Python client refuses them).
 */
export function checkWorkerOptions(o: WorkerLimits): void {
  const bad = (msg: string) => {
    throw new RangeError(`Worker: ${msg}`);
  };
  if (o.queues.length === 0) bad("queues is empty: give at least one queue (or handler)");
  for (const q of o.queues) {
    if (typeof q !== "string" || q.length === 0) bad(`queues: ${JSON.stringify(q)} is not a queue name`);
  }
  if (new Set(o.queues).size !== o.queues.length) bad("queues: a queue is listed twice");
  if (!Number.isInteger(o.concurrency) || o.concurrency < 1 || o.concurrency > 256) {
    bad(`concurrency must be an integer from 1 to 256 (the broker's max_tasks), got ${o.concurrency}`);
  }
  if (!(o.leaseDurationMs >= 1_000 && o.leaseDurationMs <= 86_400_000)) {
    bad(`leaseDurationMs must be 1 s to 24 h (the broker's limits), got ${o.leaseDurationMs}`);
  }
  if (!(o.pollWaitMs >= 0 && o.pollWaitMs <= 60_000)) bad(`pollWaitMs must be 0 to 60 s, got ${o.pollWaitMs}`);
  if (!(o.heartbeatIntervalMs > 0 && o.heartbeatIntervalMs < o.leaseDurationMs)) {
    bad(`heartbeatIntervalMs must be above 0 and below leaseDurationMs (${o.leaseDurationMs}), got ${o.heartbeatIntervalMs}`);
  }
  if (!(o.stopTimeoutMs >= 0 && Number.isFinite(o.stopTimeoutMs))) bad(`stopTimeoutMs must be 0 or more, got ${o.stopTimeoutMs}`);
}
