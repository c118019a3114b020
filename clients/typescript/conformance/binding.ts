/**
 * The `worker_id_binding` case of the scenario: a worker token bound to worker ids
 * (TASKBROKER_WORKER_TOKEN, with --secure) leases under an allowed id, is refused under
 * another with PERMISSION_DENIED, and a Worker under that id stops by itself.
 *
 * The code of each case is its folder's case.ts (clients/conformance/cases/); this module
 * holds what they share.
 */

import { type AdminClient, type BrokerClient } from "../src/index.js";

export const WORKER_ID = "conf-typescript";

export interface BindingEnv {
  broker: BrokerClient;
  admin: AdminClient;
  queue: string;
}

class Mismatch extends Error {}

export function check(ok: boolean, reason: string): asserts ok {
  if (!ok) throw new Mismatch(reason);
}

export function within<T>(ms: number, p: Promise<T>, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Mismatch(what)), ms))]);
}

