/**
 * The flow cases of the scenario: `dependency` on the broker stubs, and
 * `wait_by_stream` with the client's `wait` (which follows AdminService.WatchTasks).
 */
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  CancelReason,
  TaskState,
  WaitTimeoutError,
  wait,
  type AdminClient,
  type BrokerClient,
  type LeasedTask,
} from "../src/index.js";

const WORKER_ID = "conf-typescript";
const utf8 = new TextEncoder();
const text = new TextDecoder();

interface FlowEnv {
  broker: BrokerClient;
  admin: AdminClient;
  queue: string;
}

class Mismatch extends Error {}

function check(ok: boolean, reason: string): asserts ok {
  if (!ok) throw new Mismatch(reason);
}

async function lease(env: FlowEnv, maxTasks: number, waitMs = 0): Promise<LeasedTask[]> {
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

const payloads = (tasks: LeasedTask[]): string => JSON.stringify(tasks.map((t) => text.decode(t.payload)));

async function getTask(env: FlowEnv, taskId: string) {
  const res = await env.admin.getTask({ taskId });
  check(res.task !== undefined, `GetTask ${taskId}: no task`);
  return res.task;
}

export const flowCases: [string, (env: FlowEnv) => Promise<void>][] = [
  [
    "dependency",
    async (env) => {
      const q = env.queue;
      const ab = await env.broker.submit({
        tasks: [
          { queue: q, payload: utf8.encode("a") },
          { queue: q, payload: utf8.encode("b"), dependsOnIndex: [0] },
        ],
      });
      const [a, b] = ab.results.map((r) => r.taskId);
      let tb = await getTask(env, b!);
      check(tb.state === TaskState.BLOCKED, `b is ${TaskState[tb.state]}, want BLOCKED`);
      check(JSON.stringify(tb.dependsOn) === JSON.stringify([a]), `b depends_on ${JSON.stringify(tb.dependsOn)}, want [${a}]`);
      let got = await lease(env, 10);
      check(payloads(got) === '["a"]', `first Lease returned ${payloads(got)}, want ["a"]`);
      await env.broker.complete({ taskId: got[0]!.taskId, leaseToken: got[0]!.leaseToken });
      tb = await getTask(env, b!);
      check(tb.state === TaskState.READY, `after a completed b is ${TaskState[tb.state]}, want READY`);
      got = await lease(env, 10, 5_000);
      check(payloads(got) === '["b"]', `second Lease returned ${payloads(got)}, want ["b"]`);
      await env.broker.complete({ taskId: got[0]!.taskId, leaseToken: got[0]!.leaseToken });

      const c = (await env.broker.submit({ tasks: [{ queue: q, payload: utf8.encode("c") }] })).results[0]!.taskId;
      const de = await env.broker.submit({
        tasks: [
          { queue: q, payload: utf8.encode("d"), dependsOn: [c] },
          { queue: q, payload: utf8.encode("e"), dependsOn: [c], runIfDependencyFails: true },
        ],
      });
      const [d, e] = de.results.map((r) => r.taskId);
      got = await lease(env, 10);
      check(payloads(got) === '["c"]', `third Lease returned ${payloads(got)}, want ["c"] (d and e BLOCKED)`);
      await env.broker.fail({
        taskId: got[0]!.taskId,
        leaseToken: got[0]!.leaseToken,
        errorMessage: "broken",
        nonRetryable: true,
      });
      const td = await getTask(env, d!);
      check(
        td.state === TaskState.CANCELLED && td.cancelReason === CancelReason.DEPENDENCY_FAILED,
        `d is ${TaskState[td.state]} (${CancelReason[td.cancelReason]}), want CANCELLED (DEPENDENCY_FAILED)`,
      );
      const te = await getTask(env, e!);
      check(te.state === TaskState.READY, `e (run_if_dependency_fails) is ${TaskState[te.state]}, want READY`);
    },
  ],
  [
    "wait_by_stream",
    async (env) => {
      const q = env.queue;
      const w = (await env.broker.submit({ tasks: [{ queue: q, payload: utf8.encode("w") }] })).results[0]!.taskId;
      const waiting = wait(env.admin, w, { timeoutMs: 20_000 });
      waiting.catch(() => {}); // awaited below
      const got = await lease(env, 1, 10_000);
      check(got.length === 1 && got[0]!.taskId === w, `Lease returned ${payloads(got)}, want ${w}`);
      await env.broker.complete({ taskId: w, leaseToken: got[0]!.leaseToken, result: utf8.encode("waited") });
      const task = await waiting;
      check(
        task.state === TaskState.SUCCEEDED && text.decode(task.result) === "waited",
        `wait returned ${TaskState[task.state]} with ${JSON.stringify(text.decode(task.result))}, want SUCCEEDED "waited"`,
      );
      const again = await wait(env.admin, w, { timeoutMs: 5_000 });
      check(again.state === TaskState.SUCCEEDED, `second wait returned ${TaskState[again.state]}`);
      const x = (await env.broker.submit({ tasks: [{ queue: q, payload: utf8.encode("x") }] })).results[0]!.taskId;
      let err: unknown;
      try {
        await wait(env.admin, x, { timeoutMs: 500 });
      } catch (e) {
        err = e;
      }
      check(err instanceof WaitTimeoutError, `the wait on x ended with ${String(err)}, want WaitTimeoutError`);
      const tx = await getTask(env, x);
      check(tx.state === TaskState.READY, `x is ${TaskState[tx.state]} after the timeout, want READY`);
    },
  ],
];
