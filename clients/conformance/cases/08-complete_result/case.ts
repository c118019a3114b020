/**
 * The conformance case `complete_result`, for the TypeScript client: README.md beside this file
 * says what it does and expects.
 */
import { Env, bytes, check, getState, leaseOne, stateName, submitOne, text } from "../../../typescript/conformance/contract.js";
import { TaskState } from "../../../typescript/src/index.js";

export default async (env: Env): Promise<void> => {
  const taskId = await submitOne(env);
  const t = await leaseOne(env, 30_000);
  await env.broker.complete({ taskId, leaseToken: t.leaseToken, result: bytes("done:42") });
  await env.broker.complete({ taskId, leaseToken: t.leaseToken, result: bytes("done:42") });
  const task = await getState(env, taskId);
  check(task.state === TaskState.SUCCEEDED, `GetTask state ${stateName(task.state)}, want SUCCEEDED`);
  check(text.decode(task.result) === "done:42", `result "${text.decode(task.result)}", want "done:42"`);
};
