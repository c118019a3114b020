/**
 * `dependency_results` (a Worker's handler reads its dependency's result on its context),
 * `keys_and_replace` (the submit helper with a dependency on a key and a replace by key; the
 * leased dependent carries its dependency's result) and `submit_backpressure` (a queue's max_pending refuses a Submit with RESOURCE_EXHAUSTED,
 * RetryInfo and QuotaFailure; the client's submit waits the hinted delay and gets in) and
 * `dead_result` (waiting for a task whose handler failed for good is a TaskFailedError).
 *
 * The code of each case is its folder's case.ts (clients/conformance/cases/); this module
 * holds what they share.
 */

import { Client } from "../src/index.js";

export const WORKER_ID = "conf-typescript";
export const utf8 = new TextEncoder();
export const text = new TextDecoder();

export interface ResultsEnv {
  client: Client;
  queue: string;
}

class Mismatch extends Error {}

export function check(ok: boolean, reason: string): asserts ok {
  if (!ok) throw new Mismatch(reason);
}

