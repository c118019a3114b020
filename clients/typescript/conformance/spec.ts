/**
 * The client-library cases of clients/conformance/cases/ (docs/client-spec.md points 1 to 7): they drive the
 * Worker runtime and the helpers of src/ rather than the raw generated clients.
 *
 * The code of each case is its folder's case.ts; this module holds what they share.
 */

import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { context } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import {
  TaskState,
  Worker,
  type AdminClient,
  type BrokerClient,
  type Handler,
  type WorkerOptions,
} from "../src/index.js";

// An application with OpenTelemetry registers a context manager; the scenario does the same
// (the API alone, no SDK), so the active context follows async calls.
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());

export interface SpecEnv {
  broker: BrokerClient;
  admin: AdminClient;
  queue: string;
}

export const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
export const TRACEPARENT = `00-${TRACE_ID}-00f067aa0ba902b7-01`;

class Mismatch extends Error {}

export function check(ok: boolean, reason: string): asserts ok {
  if (!ok) throw new Mismatch(reason);
}

export function worker(env: SpecEnv, handler: Handler, options: Partial<WorkerOptions> = {}): Worker {
  return new Worker(env.broker, handler, {
    queues: [env.queue],
    workerId: "conf-typescript",
    pollWaitMs: 1_000,
    onError: () => {},
    ...options,
  });
}

export async function submit(env: SpecEnv, init: { payload?: Uint8Array; deadline?: ReturnType<typeof timestampFromMs> } = {}): Promise<string> {
  const res = await env.broker.submit({ tasks: [{ queue: env.queue, ...init }] });
  return res.results[0]!.taskId;
}

export async function state(env: SpecEnv, taskId: string): Promise<TaskState> {
  return (await env.admin.getTask({ taskId })).task!.state;
}

export async function waitState(env: SpecEnv, taskId: string, want: TaskState, withinMs = 20_000): Promise<TaskState> {
  const end = Date.now() + withinMs;
  for (;;) {
    const s = await state(env, taskId);
    if (s === want || Date.now() > end) return s;
    await new Promise((r) => setTimeout(r, 50));
  }
}

export function within<T>(ms: number, p: Promise<T>, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Mismatch(what)), ms))]);
}

