/**
 * The conformance case `lease_order`, for the TypeScript client: README.md beside this file says
 * what it does and expects.
 */
import type { MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Env, HOUR_MS, WORKER_ID, bytes, check, text } from "../../../typescript/conformance/contract.js";
import type { TaskSpecSchema } from "../../../typescript/src/index.js";

export default async (env: Env): Promise<void> => {
  const now = Date.now();
  const tasks: MessageInitShape<typeof TaskSpecSchema>[] = [
    { payload: bytes("a"), priority: 0 },
    { payload: bytes("b"), priority: 5 },
    { payload: bytes("c"), priority: 5, deadline: timestampFromMs(now + 2 * HOUR_MS) },
    { payload: bytes("d"), priority: 5, deadline: timestampFromMs(now + HOUR_MS) },
    { payload: bytes("e"), priority: -1 },
    { payload: bytes("f"), priority: 10, runAt: timestampFromMs(now + HOUR_MS) },
  ].map((t) => ({ ...t, queue: env.queue }));
  const sub = await env.broker.submit({ tasks });
  check(sub.results.length === 6, `Submit returned ${sub.results.length} results, want 6`);
  const res = await env.broker.lease({
    workerId: WORKER_ID,
    queues: [env.queue],
    maxTasks: 10,
    leaseDuration: durationFromMs(30_000),
    wait: durationFromMs(0),
  });
  const got = res.tasks.map((t) => text.decode(t.payload)).join(",");
  check(got === "d,c,b,a,e", `leased payloads [${got}], want [d,c,b,a,e]`);
  const attempts = res.tasks.map((t) => t.attempt);
  check(attempts.every((a) => a === 1), `attempts [${attempts.join(",")}], want all 1`);
  for (const t of res.tasks) {
    await env.broker.complete({ taskId: t.taskId, leaseToken: t.leaseToken });
  }
};
