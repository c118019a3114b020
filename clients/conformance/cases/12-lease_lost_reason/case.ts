/**
 * The conformance case `lease_lost_reason`, for the TypeScript client: README.md beside this file
 * says what it does and expects.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { SpecEnv, check, submit } from "../../../typescript/conformance/spec.js";
import { isLeaseLost } from "../../../typescript/src/index.js";

export default async (env: SpecEnv): Promise<void> => {
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
};
