/**
 * The conformance case `schedule_every`, for the TypeScript client: README.md beside this file
 * says what it does and expects.
 */
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { Env, bytes, check, leaseOne, text } from "../../../typescript/conformance/contract.js";
import { OverlapPolicy, ScheduleState } from "../../../typescript/src/index.js";

export default async (env: Env): Promise<void> => {
  const id = env.queue;
  const created = await env.schedules.createSchedule({
    schedule: {
      scheduleId: id,
      spec: { kind: { case: "every", value: durationFromMs(1_000) } },
      task: { queue: env.queue, payload: bytes("tick") },
      overlap: OverlapPolicy.ALLOW,
    },
  });
  check(created.schedule?.state === ScheduleState.ACTIVE, `state ${created.schedule?.state}, want ACTIVE`);
  for (let i = 0; i < 2; i++) {
    const t = await leaseOne(env, 30_000, 10_000);
    check(text.decode(t.payload) === "tick", `payload "${text.decode(t.payload)}", want "tick"`);
    check(t.metadata["taskbroker.schedule_id"] === id, `metadata lacks taskbroker.schedule_id=${id}`);
    await env.broker.complete({ taskId: t.taskId, leaseToken: t.leaseToken });
  }
  const got = await env.schedules.getSchedule({ scheduleId: id });
  check((got.schedule?.runs ?? 0n) >= 2n, `runs ${got.schedule?.runs}, want >= 2`);
  await env.schedules.deleteSchedule({ scheduleId: id });
  let err: unknown;
  try {
    await env.schedules.getSchedule({ scheduleId: id });
  } catch (e) {
    err = e;
  }
  check(err !== undefined, "GetSchedule after delete succeeded");
  const ce = ConnectError.from(err);
  check(ce.code === Code.NotFound, `after delete: ${Code[ce.code]}, want NotFound`);
};
