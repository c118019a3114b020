/**
 * The conformance case `retryable_fail`, for the TypeScript client: README.md beside this file
 * says what it does and expects.
 */
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Env, check, leaseOne, stateName, submitOne } from "../../../typescript/conformance/contract.js";
import { TaskState } from "../../../typescript/src/index.js";

export default async (env: Env): Promise<void> => {
  const taskId = await submitOne(env, { retry: { maxAttempts: 3, initialBackoff: durationFromMs(0) } });
  const first = await leaseOne(env, 30_000);
  const res = await env.broker.fail({ taskId, leaseToken: first.leaseToken, errorMessage: "boom" });
  check(
    res.state === TaskState.READY || res.state === TaskState.SCHEDULED,
    `Fail state ${stateName(res.state)}, want READY or SCHEDULED`,
  );
  check(res.nextRunAt !== undefined, "Fail next_run_at unset");
  const second = await leaseOne(env, 30_000, 5_000);
  check(second.taskId === taskId, `second lease got ${second.taskId}, want ${taskId}`);
  check(second.attempt === 2, `attempt ${second.attempt}, want 2`);
  await env.broker.complete({ taskId, leaseToken: second.leaseToken });
};
