/**
 * How the Worker settles a task whose handler has returned: Complete (through the completer,
 * which batches) or Fail, with the freed slot's lease_next; a settle that meets an unreachable
 * broker is retried with backoff until the lease's expiry is near. Resolves with the tasks the
 * settle leased.
 */
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { TaskState, type LeasedTask } from "./gen/taskbroker/v1/broker_pb.js";
import { isLeaseLost, type BrokerClient } from "./client.js";
import type { TaskContext } from "./context.js";
import { transient, type Completer } from "./completer.js";
import type { TaskOutcome, WorkerMetrics } from "./metrics.js";
import { backoffMs, DEFAULTS } from "./spec.js";
import type { Logger } from "./worker_options.js";
import { failRequest, logFailure, plain, sleep } from "./worker_support.js";

/** What a handler's call came to: a result to complete with, or an error to fail with. */
export type Outcome = { ok: true; result: Uint8Array; value: unknown } | { ok: false; error: unknown; thrown: boolean };

/** The settle's lease_next: the freed slot's next task. */
export type LeaseNext = Parameters<Completer["complete"]>[0]["leaseNext"];

/** What settling needs of its worker. */
export interface Settler {
  broker: BrokerClient;
  completer: Completer;
  metrics: WorkerMetrics;
  log: Logger;
  /** Aborted when a stop's margin runs out: a settle still retried then is abandoned. */
  abandon: AbortSignal;
  /** The lease_next to send with each try; undefined when off or stopping. */
  nextLease: () => LeaseNext;
  onError: (err: unknown, during: string) => void;
  completed: (ctx: TaskContext, value: unknown) => void;
  failed: (ctx: TaskContext, error: unknown, state: TaskState) => void;
}

/** Logs a failed attempt, then sends its Complete or Fail until it is answered or given up. */
export async function settle(s: Settler, ctx: TaskContext, outcome: Outcome, seconds: number): Promise<LeasedTask[]> {
  if (!outcome.ok) logFailure(s.log, ctx, outcome.error, outcome.thrown);
  const call = outcome.ok ? "complete" : "fail";
  const id = ctx.taskId;
  // Complete and Fail are idempotent for the same lease token, which stays valid across a
  // broker restart: a settle that met an unreachable broker is sent again with backoff until
  // the next try would start within the settle margin of the lease's expiry.
  for (let failures = 0; ; failures++) {
    const leaseNext = s.nextLease();
    let error: unknown;
    let next: LeasedTask[] = [];
    let state = TaskState.UNSPECIFIED;
    if (outcome.ok) {
      const settled = await s.completer.complete({ taskId: id, leaseToken: ctx.task.leaseToken, result: outcome.result, leaseNext });
      ({ error, next } = settled);
    } else {
      const req = failRequest(ctx, outcome.error);
      if (ctx.abortKind === "stopping") req.retryAfter = durationFromMs(0); // hand back
      s.metrics.settleCall("Fail");
      try {
        const res = await s.broker.fail({ ...req, leaseNext }, { signal: s.abandon, timeoutMs: DEFAULTS.callTimeoutMs });
        next = res.nextTasks;
        state = res.state;
      } catch (err) {
        error = err;
      }
    }
    if (error === undefined) {
      if (outcome.ok) {
        s.metrics.task(ctx.queue, "succeeded", seconds);
        s.completed(ctx, outcome.value);
      } else {
        const cancelled = state === TaskState.CANCELLED || ctx.abortKind === "cancelled";
        s.metrics.task(ctx.queue, cancelled ? "cancelled" : "failed", seconds);
        s.failed(ctx, outcome.error, state);
      }
      return next;
    }
    let ended: TaskOutcome | undefined;
    if (isLeaseLost(error)) {
      s.log.warn(`taskbroker worker: task ${id}: ${call} refused: lease lost (LEASE_LOST); another attempt may run`);
      s.metrics.leaseLost(ctx.queue);
      ended = "lease_lost";
    } else if (s.abandon.aborted) {
      s.log.warn(`taskbroker worker: task ${id}: ${call} abandoned: the worker stopped while it was retried`);
      ended = "failed";
    } else if (!transient(error)) {
      // (connect-node reports a connection the broker dropped as CANCELED; transient() counts
      // it, since this settle was not cancelled by us: abandon is checked above.)
      s.onError(error, `report task ${id}`);
      ended = "failed";
    } else {
      const pause = backoffMs(failures);
      if (Date.now() + pause + DEFAULTS.settleMarginMs > ctx.leaseExpiresAt.getTime()) {
        s.log.warn(`taskbroker worker: task ${id}: ${call} given up at the lease's expiry (${plain(error)}); the broker will hand the task out again`);
        ended = "lease_lost";
      } else {
        s.log.warn(`taskbroker worker: task ${id}: ${call} failed (${plain(error)}); retrying in ${Math.round(pause)} ms`);
        s.metrics.settleRetry(ctx.queue);
        await sleep(pause, s.abandon);
      }
    }
    if (ended !== undefined) {
      s.metrics.task(ctx.queue, ended, seconds);
      return next;
    }
  }
}
