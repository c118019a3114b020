/**
 * The conformance case `cancel_running`, for the TypeScript client: README.md beside this file
 * says what it does and expects.
 */
import { Env, WORKER_ID, check, leaseOne, stateName, submitOne } from "../../../typescript/conformance/contract.js";
import { TaskState } from "../../../typescript/src/index.js";

export default async (env: Env): Promise<void> => {
  const taskId = await submitOne(env);
  const t = await leaseOne(env, 30_000);
  await env.admin.cancelTask({ taskId });
  const hb = await env.broker.heartbeat({ workerId: WORKER_ID, leases: [{ taskId, leaseToken: t.leaseToken }] });
  const st = hb.leases[0];
  check(st !== undefined, "Heartbeat returned no status");
  check(st.cancelRequested && !st.lost, `cancel_requested=${st.cancelRequested} lost=${st.lost}, want true/false`);
  const res = await env.broker.fail({ taskId, leaseToken: t.leaseToken, errorMessage: "cancelled" });
  check(res.state === TaskState.CANCELLED, `Fail state ${stateName(res.state)}, want CANCELLED`);
};
