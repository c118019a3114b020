/**
 * Helpers of the contract cases (the first ten of clients/conformance/cases.txt and
 * `schedule_every`), which drive the generated stubs directly; the harness (main.ts) runs
 * every case with an `Env`.
 */

import { durationFromMs, timestampMs, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  type Client,
  TaskState,
  type AdminClient,
  type BrokerClient,
  type ScheduleClient,
  type LeasedTask,
  type TaskSpecSchema,
} from "../src/index.js";
import type { MessageInitShape } from "@bufbuild/protobuf";

export const LANG = "typescript";
export const WORKER_ID = `conf-${LANG}`;
const utf8 = new TextEncoder();
export const text = new TextDecoder();
export const HOUR_MS = 3_600_000;

export interface Env {
  /** The typed client the services below belong to. */
  client: Client;
  broker: BrokerClient;
  admin: AdminClient;
  schedules: ScheduleClient;
  /** A fresh queue for this case: conf.typescript.<case>.<random>. */
  queue: string;
}

export type Case = (env: Env) => Promise<void>;

export class Mismatch extends Error {}

export function check(ok: boolean, reason: string): asserts ok {
  if (!ok) throw new Mismatch(reason);
}

export function bytes(s: string): Uint8Array {
  return utf8.encode(s);
}

export function ms(ts: Timestamp | undefined): number | undefined {
  return ts === undefined ? undefined : timestampMs(ts);
}

export function stateName(s: TaskState): string {
  return TaskState[s] ?? String(s);
}

export async function submitOne(env: Env, spec: Omit<MessageInitShape<typeof TaskSpecSchema>, "queue" | "$typeName"> = {}): Promise<string> {
  const res = await env.broker.submit({ tasks: [{ queue: env.queue, ...spec }] });
  check(res.results.length === 1, `Submit returned ${res.results.length} results, want 1`);
  return res.results[0]!.taskId;
}

export async function leaseOne(env: Env, leaseMs: number, waitMs = 0): Promise<LeasedTask> {
  const res = await env.broker.lease(
    {
      workerId: WORKER_ID,
      queues: [env.queue],
      maxTasks: 1,
      leaseDuration: durationFromMs(leaseMs),
      wait: durationFromMs(waitMs),
    },
    { timeoutMs: waitMs + 10_000 },
  );
  check(res.tasks.length === 1, `Lease(wait=${waitMs}ms) returned ${res.tasks.length} tasks, want 1`);
  return res.tasks[0]!;
}

export async function getState(env: Env, taskId: string) {
  const res = await env.admin.getTask({ taskId });
  check(res.task !== undefined, `GetTask(${taskId}) returned no task`);
  return res.task;
}

