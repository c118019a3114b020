/**
 * The conformance case `heartbeat_extends`, for the TypeScript client: README.md beside this file
 * says what it does and expects.
 */
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Env, WORKER_ID, check, leaseOne, ms, submitOne } from "../../../typescript/conformance/contract.js";

export default async (env: Env): Promise<void> => {
  const taskId = await submitOne(env);
  const t = await leaseOne(env, 5_000);
  check(t.taskId === taskId, `leased ${t.taskId}, want ${taskId}`);
  const hb = await env.broker.heartbeat({
    workerId: WORKER_ID,
    leases: [{ taskId, leaseToken: t.leaseToken }],
    extendBy: durationFromMs(60_000),
  });
  check(hb.leases.length === 1, `Heartbeat returned ${hb.leases.length} statuses, want 1`);
  const st = hb.leases[0]!;
  check(!st.lost, "Heartbeat reported lost=true for a live lease");
  const before = ms(t.leaseExpiresAt);
  const after = ms(st.leaseExpiresAt);
  check(before !== undefined && after !== undefined, "lease_expires_at unset");
  check(after - before >= 30_000, `lease_expires_at moved by ${after - before} ms, want >= 30000`);
  const stale = await env.broker.heartbeat({
    workerId: WORKER_ID,
    leases: [{ taskId, leaseToken: "stale" }],
  });
  check(stale.leases.length === 1, `stale Heartbeat returned ${stale.leases.length} statuses, want 1`);
  check(stale.leases[0]!.lost, "stale Heartbeat answered lost=false, want true");
};
