/**
 * The client-library cases of SCENARIO.md (docs/client-spec.md points 1 to 7): they drive the
 * Worker runtime and the helpers of src/ rather than the raw generated clients.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { context, trace, TraceFlags } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import {
  backoffCeilingMs,
  backoffMs,
  connect,
  isLeaseLost,
  optionsFromEnv,
  stopsWorker,
  TaskState,
  Worker,
  WorkerStoppedError,
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

const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACEPARENT = `00-${TRACE_ID}-00f067aa0ba902b7-01`;

class Mismatch extends Error {}

function check(ok: boolean, reason: string): asserts ok {
  if (!ok) throw new Mismatch(reason);
}

function worker(env: SpecEnv, handler: Handler, options: Partial<WorkerOptions> = {}): Worker {
  return new Worker(env.broker, handler, {
    queues: [env.queue],
    workerId: "conf-typescript",
    pollWaitMs: 1_000,
    onError: () => {},
    ...options,
  });
}

async function submit(env: SpecEnv, init: { payload?: Uint8Array; deadline?: ReturnType<typeof timestampFromMs> } = {}): Promise<string> {
  const res = await env.broker.submit({ tasks: [{ queue: env.queue, ...init }] });
  return res.results[0]!.taskId;
}

async function state(env: SpecEnv, taskId: string): Promise<TaskState> {
  return (await env.admin.getTask({ taskId })).task!.state;
}

async function waitState(env: SpecEnv, taskId: string, want: TaskState, withinMs = 20_000): Promise<TaskState> {
  const end = Date.now() + withinMs;
  for (;;) {
    const s = await state(env, taskId);
    if (s === want || Date.now() > end) return s;
    await new Promise((r) => setTimeout(r, 50));
  }
}

function within<T>(ms: number, p: Promise<T>, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Mismatch(what)), ms))]);
}

export const specCases: [string, (env: SpecEnv) => Promise<void>][] = [
  [
    "spec_defaults",
    async (env) => {
      const s = worker(env, async () => {}, { pollWaitMs: undefined, onError: undefined }).settings;
      const got = [s.concurrency, s.pollWaitMs, s.leaseDurationMs, s.heartbeatIntervalMs, s.stopTimeoutMs];
      check(got.join() === "4,10000,30000,10000,30000", `defaults ${got}, want 4,10000,30000,10000,30000`);
      check(backoffCeilingMs(0) === 200 && backoffCeilingMs(10) === 10_000, `ceilings ${backoffCeilingMs(0)} ${backoffCeilingMs(10)}`);
      const draws = Array.from({ length: 50 }, () => backoffMs(3));
      check(draws.every((d) => d >= 160 && d <= 1600), `backoffMs(3) outside [160, 1600]: ${Math.min(...draws)}..${Math.max(...draws)}`);
      check(new Set(draws).size > 1, "backoffMs(3) has no jitter");
      for (const c of [Code.Unauthenticated, Code.PermissionDenied, Code.InvalidArgument, Code.Unimplemented]) {
        check(stopsWorker(new ConnectError("x", c)), `stopsWorker(${Code[c]}) false`);
      }
      check(!stopsWorker(new ConnectError("x", Code.Unavailable)), "stopsWorker(Unavailable) true");
    },
  ],
  [
    "lease_lost_reason",
    async (env) => {
      await submit(env);
      const { tasks } = await env.broker.lease({ workerId: "conf-typescript", queues: [env.queue], maxTasks: 1 });
      check(tasks.length === 1, "no task leased");
      let err: unknown;
      try {
        await env.broker.complete({ taskId: tasks[0]!.taskId, leaseToken: "stale" });
      } catch (e) {
        err = e;
      }
      check(isLeaseLost(err), `isLeaseLost false for the broker's answer ${String(err)}`);
      check(!isLeaseLost(new ConnectError("aborted for another reason", Code.Aborted)), "isLeaseLost true for a bare ABORTED");
    },
  ],
  [
    "checkpoint_extends",
    async (env) => {
      const id = await submit(env);
      let leased = 0;
      let after = 0;
      const w = worker(
        env,
        async (ctx) => {
          leased = ctx.leaseExpiresAt.getTime();
          await new Promise((r) => setTimeout(r, 100));
          await ctx.checkpoint("half");
          after = ctx.leaseExpiresAt.getTime();
          return "ok";
        },
        { leaseDurationMs: 4_000 },
      );
      const run = w.run();
      const s = await waitState(env, id, TaskState.SUCCEEDED);
      await w.close();
      await run;
      check(s === TaskState.SUCCEEDED, `state ${TaskState[s]}, want SUCCEEDED`);
      check(after > leased, `expiry ${leased} -> ${after}: the checkpoint did not extend the lease`);
    },
  ],
  [
    "deadline_cancels",
    async (env) => {
      await submit(env, { deadline: timestampFromMs(Date.now() + 2_000) });
      let resolveKind: (k: string | undefined) => void = () => {};
      const kind = new Promise<string | undefined>((r) => (resolveKind = r));
      const w = worker(env, async (ctx) => {
        await new Promise<void>((r) => {
          const t = setTimeout(r, 20_000);
          ctx.signal.addEventListener("abort", () => (clearTimeout(t), r()), { once: true });
        });
        resolveKind(ctx.abortKind);
        throw new Error("cancelled");
      });
      const run = w.run();
      try {
        const k = await within(25_000, kind, "the handler never ran");
        check(k === "deadline", `abort kind ${k}, want deadline`);
      } finally {
        await w.close();
        await run;
      }
    },
  ],
  [
    "stop_codes",
    async (env) => {
      const expectStop = async (w: Worker, want: Code, what: string) => {
        let err: unknown;
        try {
          await within(20_000, w.run(), "the worker kept running");
        } catch (e) {
          err = e;
        } finally {
          await w.close();
        }
        check(err instanceof WorkerStoppedError && err.code === want, `${what}: run() ended with ${String(err)}, want WorkerStoppedError ${Code[want]}`);
      };
      await expectStop(worker({ ...env, queue: "has space" }, async () => {}), Code.InvalidArgument, "bad queue");
      if (process.env["TASKBROKER_TOKEN"]) {
        const bad = connect(process.env["TASKBROKER_ADDR"]!, { ...optionsFromEnv(), token: "wrong-token-0123456789" });
        await expectStop(worker({ ...env, broker: bad.broker }, async () => {}), Code.Unauthenticated, "wrong token");
      }
    },
  ],
  [
    "drain_on_sigterm",
    async (env) => {
      const a = await submit(env, { payload: new TextEncoder().encode("a") });
      let started: () => void = () => {};
      const running = new Promise<void>((r) => (started = r));
      let release: () => void = () => {};
      const released = new Promise<void>((r) => (release = r));
      const w = worker(
        env,
        async () => {
          started();
          await released;
          return "done";
        },
        { concurrency: 1 },
      );
      const run = w.run({ handleSignals: true });
      await within(20_000, running, "the handler never ran");
      const b = await submit(env, { payload: new TextEncoder().encode("b") });
      process.kill(process.pid, "SIGTERM");
      await new Promise((r) => setTimeout(r, 300)); // the signal is delivered on the event loop
      release();
      await within(20_000, run, "run() did not return after SIGTERM");
      const sa = await state(env, a);
      const sb = await state(env, b);
      check(sa === TaskState.SUCCEEDED && sb === TaskState.READY, `a ${TaskState[sa]}, b ${TaskState[sb]}; want SUCCEEDED, READY`);
    },
  ],
  [
    "trace_propagation",
    async (env) => {
      const sc = { traceId: TRACE_ID, spanId: "00f067aa0ba902b7", traceFlags: TraceFlags.SAMPLED, isRemote: true };
      const id = await context.with(trace.setSpanContext(context.active(), sc), () => submit(env));
      const tp = (await env.admin.getTask({ taskId: id })).task!.metadata["traceparent"];
      check(tp === TRACEPARENT, `metadata traceparent ${tp}, want ${TRACEPARENT}`);
      let resolveSeen: (s: string | undefined) => void = () => {};
      const seen = new Promise<string | undefined>((r) => (resolveSeen = r));
      const w = worker(env, async () => {
        resolveSeen(trace.getSpanContext(context.active())?.traceId);
      });
      const run = w.run();
      try {
        const got = await within(20_000, seen, "the handler never ran");
        check(got === TRACE_ID, `handler saw trace id ${got}, want ${TRACE_ID}`);
      } finally {
        await w.close();
        await run;
      }
    },
  ],
];
