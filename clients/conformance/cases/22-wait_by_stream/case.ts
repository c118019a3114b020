/**
 * The conformance case `wait_by_stream`, for the TypeScript client: README.md beside this file
 * says what it does and expects.
 */
import { FlowEnv, check, getTask, lease, payloads, text, utf8 } from "../../../typescript/conformance/flow.js";
import { TaskState, WaitTimeoutError, wait } from "../../../typescript/src/index.js";

export default async (env: FlowEnv): Promise<void> => {
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
};
