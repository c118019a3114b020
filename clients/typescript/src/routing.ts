/**
 * Routing: builders for the TaskSpec fields that say who may lease a task
 * (`target`), how its retries stay on one worker (`sticky`) and how many copies Submit makes
 * (`fanout`). Workers say what they are with `WorkerOptions.labels`.
 *
 * ```ts
 * const res = await tb.broker.submit({ tasks: [{
 *   queue: "render", payload,
 *   target: target({ labels: { gpu: "a100" } }),
 *   sticky: sticky("soft", { timeoutMs: 60_000 }),
 * }] });
 * res.results[0].copyTaskIds; // with fanout: every copy's id, the first being taskId
 * ```
 */
import { create } from "@bufbuild/protobuf";
import {
  FanoutSchema,
  StickyPolicySchema,
  StickyStrategy,
  TargetSchema,
  type Fanout,
  type StickyPolicy,
  type Target,
} from "./gen/taskbroker/v1/broker_pb.js";

/** At most this many labels on a worker or a target. */
export const MAX_LABELS = 32;

/**
 * Only the worker with `workerId` (when given), and only a worker whose labels include every
 * pair of `labels` (when any), may lease the task. No such worker is not an error: the task waits.
 */
export function target(to: { workerId?: string; labels?: Record<string, string> }): Target {
  if (!to.workerId && Object.keys(to.labels ?? {}).length === 0) {
    throw new Error("a target needs a workerId or labels");
  }
  return create(TargetSchema, { workerId: to.workerId ?? "", labels: { ...to.labels } });
}

/**
 * A retry is reserved for the worker that ran the failed attempt. `"soft"`: until `timeoutMs`
 * passes (1 s to 24 h; the broker's default 30 s), then any worker; `"hard"`: until the task's
 * deadline or an admin requeue.
 */
export function sticky(strategy: "soft" | "hard", options: { timeoutMs?: number } = {}): StickyPolicy {
  if (strategy !== "soft" && strategy !== "hard") {
    throw new Error(`sticky strategy must be "soft" or "hard", not ${JSON.stringify(strategy)}`);
  }
  if (strategy === "hard" && options.timeoutMs !== undefined) {
    throw new Error("a hard sticky policy has no timeout");
  }
  const timeout =
    options.timeoutMs === undefined
      ? undefined
      : {
          seconds: BigInt(Math.floor(options.timeoutMs / 1000)),
          nanos: Math.round((options.timeoutMs % 1000) * 1e6),
        };
  return create(StickyPolicySchema, {
    strategy: strategy === "soft" ? StickyStrategy.SOFT : StickyStrategy.HARD,
    ...(timeout === undefined ? {} : { timeout }),
  });
}

/**
 * Submit makes `copies` tasks (1 to 1000) sharing a fan-out group, the first copy's id; the
 * SubmitResult's `copyTaskIds` lists them. With `distinctWorkers` no worker gets two copies.
 */
export function fanout(copies: number, options: { distinctWorkers?: boolean } = {}): Fanout {
  if (!Number.isInteger(copies) || copies < 1 || copies > 1000) {
    throw new Error("fanout copies must be 1 to 1000");
  }
  return create(FanoutSchema, { copies, distinctWorkers: options.distinctWorkers ?? false });
}
