/**
 * The routing cases of the scenario: `targeted_task` and `sticky_retry`, on the
 * broker stubs with the client's `target` / `sticky` builders.
 *
 * The code of each case is its folder's case.ts (clients/conformance/cases/); this module
 * holds what they share.
 */
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { type BrokerClient, type LeasedTask } from "../src/index.js";

export const WORKER_ID = "conf-typescript";
export const utf8 = new TextEncoder();
const text = new TextDecoder();

export interface RoutingEnv {
  broker: BrokerClient;
  queue: string;
}

class Mismatch extends Error {}

export function check(ok: boolean, reason: string): asserts ok {
  if (!ok) throw new Mismatch(reason);
}

export async function leaseAs(env: RoutingEnv, workerId: string, labels: Record<string, string> = {}, waitMs = 0): Promise<LeasedTask[]> {
  const res = await env.broker.lease(
    {
      workerId,
      queues: [env.queue],
      maxTasks: 10,
      leaseDuration: durationFromMs(30_000),
      wait: durationFromMs(waitMs),
      labels,
    },
    { timeoutMs: waitMs + 10_000 },
  );
  return res.tasks;
}

export const payloads = (tasks: LeasedTask[]): string => JSON.stringify(tasks.map((t) => text.decode(t.payload)));

export async function complete(env: RoutingEnv, t: LeasedTask): Promise<void> {
  await env.broker.complete({ taskId: t.taskId, leaseToken: t.leaseToken });
}

