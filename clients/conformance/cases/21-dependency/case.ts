/**
 * The conformance case `dependency`, for the TypeScript client: README.md beside this file says
 * what it does and expects.
 */
import { FlowEnv, check, getTask, lease, payloads, utf8 } from "../../../typescript/conformance/flow.js";
import { CancelReason, TaskState } from "../../../typescript/src/index.js";

export default async (env: FlowEnv): Promise<void> => {
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
};
