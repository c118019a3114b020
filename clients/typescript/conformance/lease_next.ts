/**
 * The `lease_next` case of the scenario: Complete and Fail carry the next lease
 * and answer with nextTasks.
 *
 * The code of each case is its folder's case.ts (clients/conformance/cases/); this module
 * holds what they share.
 */

import { TaskState, type AdminClient, type BrokerClient, type LeasedTask } from "../src/index.js";

export const WORKER_ID = "conf-typescript";
export const utf8 = new TextEncoder();
const text = new TextDecoder();

export interface LeaseNextEnv {
  broker: BrokerClient;
  admin: AdminClient;
  queue: string;
}

export class Mismatch extends Error {}

export function check(ok: boolean, reason: string): asserts ok {
  if (!ok) throw new Mismatch(reason);
}

export function payloads(tasks: LeasedTask[]): string {
  return JSON.stringify(tasks.map((t) => text.decode(t.payload)));
}

export async function state(env: LeaseNextEnv, taskId: string): Promise<TaskState> {
  return (await env.admin.getTask({ taskId })).task?.state ?? TaskState.UNSPECIFIED;
}

