/**
 * The `typed_handlers` case of the scenario: one Worker with a typed handler on each of two
 * queues and one middleware; typed submits and results; the metrics read through the real
 * OpenTelemetry SDK; a payload that does not decode ends DEAD.
 *
 * The code of each case is its folder's case.ts (clients/conformance/cases/); this module
 * holds what they share.
 */

import { Client } from "../src/index.js";

export const WORKER_ID = "conf-typescript";

export interface TypedEnv {
  client: Client;
}

class Mismatch extends Error {}

export function check(ok: boolean, reason: string): asserts ok {
  if (!ok) throw new Mismatch(reason);
}

export interface A {
  to: string;
  n: number;
}
export interface B {
  n: number;
}
export interface Out {
  ok: boolean;
  n: number;
}

