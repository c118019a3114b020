/**
 * The flow cases of the scenario: `dependency` on the broker stubs, and
 * `wait_by_stream` with the client's `wait` (which follows AdminService.WatchTasks).
 *
 * The code of each case is its folder's case.ts (clients/conformance/cases/); this module
 * holds what they share.
 */
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { type AdminClient, type BrokerClient, type LeasedTask } from "../src/index.js";

const WORKER_ID = "conf-typescript";
export const utf8 = new TextEncoder();
export const text = new TextDecoder();

export interface FlowEnv {
  broker: BrokerClient;
  admin: AdminClient;
  queue: string;
}

class Mismatch extends Error {}

export function check(ok: boolean, reason: string): asserts ok {
  if (!ok) throw new Mismatch(reason);
}

export async function lease(env: FlowEnv, maxTasks: number, waitMs = 0): Promise<LeasedTask[]> {
  const res = await env.broker.lease(
    {
      workerId: WORKER_ID,
      queues: [env.queue],
      maxTasks,
      leaseDuration: durationFromMs(30_000),
      wait: durationFromMs(waitMs),
    },
    { timeoutMs: waitMs + 10_000 },
  );
  return res.tasks;
}

export const payloads = (tasks: LeasedTask[]): string => JSON.stringify(tasks.map((t) => text.decode(t.payload)));

export async function getTask(env: FlowEnv, taskId: string) {
  const res = await env.admin.getTask({ taskId });
  check(res.task !== undefined, `GetTask ${taskId}: no task`);
  return res.task;
}

