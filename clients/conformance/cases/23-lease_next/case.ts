/**
 * The conformance case `lease_next`, for the TypeScript client: README.md beside this file says
 * what it does and expects.
 */
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { LeaseNextEnv, Mismatch, WORKER_ID, check, payloads, state, utf8 } from "../../../typescript/conformance/lease_next.js";
import { TaskState } from "../../../typescript/src/index.js";

export default async (env: LeaseNextEnv): Promise<void> => {
  const q = env.queue;
  const sub = await env.broker.submit({
    tasks: [
      { queue: q, payload: utf8.encode("a"), priority: 2 },
      { queue: q, payload: utf8.encode("b"), priority: 1 },
      { queue: q, payload: utf8.encode("c"), priority: 0 },
    ],
  });
  const ids = sub.results.map((r) => r.taskId);
  const got = (
    await env.broker.lease({
      workerId: WORKER_ID,
      queues: [q],
      maxTasks: 1,
      leaseDuration: durationFromMs(30_000),
      wait: durationFromMs(0),
    })
  ).tasks;
  check(payloads(got) === '["a"]', `Lease returned ${payloads(got)}, want ["a"]`);
  const next = (maxTasks: number) => ({
    workerId: WORKER_ID,
    queues: [q],
    maxTasks,
    leaseDuration: durationFromMs(30_000),
  });
  const a = got[0]!;
  const done = await env.broker.complete({ taskId: a.taskId, leaseToken: a.leaseToken, leaseNext: next(1) });
  check(payloads(done.nextTasks) === '["b"]', `Complete's nextTasks ${payloads(done.nextTasks)}, want ["b"]`);
  const b = done.nextTasks[0]!;
  check(b.attempt === 1 && b.leaseToken !== "", `b: attempt ${b.attempt}, want 1 with a lease token`);
  const sa = await state(env, ids[0]!);
  check(sa === TaskState.SUCCEEDED, `a is ${TaskState[sa]}, want SUCCEEDED`);
  const failed = await env.broker.fail({
    taskId: b.taskId,
    leaseToken: b.leaseToken,
    errorMessage: "boom",
    nonRetryable: true,
    leaseNext: next(1),
  });
  check(failed.state === TaskState.DEAD, `Fail: state ${TaskState[failed.state]}, want DEAD`);
  check(payloads(failed.nextTasks) === '["c"]', `Fail's nextTasks ${payloads(failed.nextTasks)}, want ["c"]`);
  const c = failed.nextTasks[0]!;
  try {
    await env.broker.complete({ taskId: c.taskId, leaseToken: c.leaseToken, leaseNext: next(0) });
    throw new Mismatch("Complete with leaseNext.maxTasks 0: OK, want InvalidArgument");
  } catch (err) {
    if (err instanceof Mismatch) throw err;
    const ce = ConnectError.from(err);
    check(
      ce.code === Code.InvalidArgument && ce.rawMessage.includes("lease_next.max_tasks"),
      `Complete with lease_next.max_tasks 0: ${Code[ce.code]} (${ce.rawMessage}), want InvalidArgument naming lease_next.max_tasks`,
    );
  }
  let sc = await state(env, ids[2]!);
  check(sc === TaskState.LEASED, `c is ${TaskState[sc]} after the refused Complete, want LEASED`);
  const last = await env.broker.complete({ taskId: c.taskId, leaseToken: c.leaseToken, leaseNext: next(1) });
  check(last.nextTasks.length === 0, `the last Complete's nextTasks ${payloads(last.nextTasks)}, want none`);
  sc = await state(env, ids[2]!);
  check(sc === TaskState.SUCCEEDED, `c is ${TaskState[sc]}, want SUCCEEDED`);
};
