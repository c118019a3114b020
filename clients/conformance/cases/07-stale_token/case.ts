/**
 * The conformance case `stale_token`, for the TypeScript client: README.md beside this file says
 * what it does and expects.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { Env, check, getState, leaseOne, stateName, submitOne } from "../../../typescript/conformance/contract.js";
import { errorInfo, TaskState } from "../../../typescript/src/index.js";

export default async (env: Env): Promise<void> => {
  const taskId = await submitOne(env);
  await leaseOne(env, 30_000);
  let err: unknown;
  try {
    await env.broker.complete({ taskId, leaseToken: "stale" });
  } catch (e) {
    err = e;
  }
  check(err !== undefined, "Complete with a stale token succeeded");
  const ce = ConnectError.from(err);
  check(ce.code === Code.Aborted, `status ${Code[ce.code]} (${ce.rawMessage}), want Aborted`);
  const info = errorInfo(ce);
  check(info !== undefined, `no google.rpc.ErrorInfo in the status details (${ce.details.length} details)`);
  check(info.reason === "LEASE_LOST", `ErrorInfo.reason "${info.reason}", want LEASE_LOST`);
  check(info.domain === "taskbroker.dev", `ErrorInfo.domain "${info.domain}", want taskbroker.dev`);
  const task = await getState(env, taskId);
  check(task.state === TaskState.LEASED, `GetTask state ${stateName(task.state)}, want LEASED`);
};
