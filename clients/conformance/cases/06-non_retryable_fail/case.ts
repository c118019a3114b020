/**
 * The conformance case `non_retryable_fail`, for the TypeScript client: README.md beside this file
 * says what it does and expects.
 */
import { Env, check, getState, leaseOne, stateName, submitOne } from "../../../typescript/conformance/contract.js";
import { TaskState } from "../../../typescript/src/index.js";

export default async (env: Env): Promise<void> => {
  const taskId = await submitOne(env);
  const t = await leaseOne(env, 30_000);
  const res = await env.broker.fail({ taskId, leaseToken: t.leaseToken, errorMessage: "bad input", nonRetryable: true });
  check(res.state === TaskState.DEAD, `Fail state ${stateName(res.state)}, want DEAD`);
  const task = await getState(env, taskId);
  check(task.state === TaskState.DEAD, `GetTask state ${stateName(task.state)}, want DEAD`);
  check(task.lastError === "bad input", `last_error "${task.lastError}", want "bad input"`);
};
