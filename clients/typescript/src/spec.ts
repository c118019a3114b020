/**
 * The numbers and rules of docs/client-spec.md that every client shares. Pure: no I/O.
 */
import { Code, ConnectError } from "@connectrpc/connect";

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
