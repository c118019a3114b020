/**
 * The conformance case `sticky_retry`, for the TypeScript client: README.md beside this file says
 * what it does and expects.
 */
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { RoutingEnv, WORKER_ID, check, complete, leaseAs, utf8 } from "../../../typescript/conformance/routing.js";
import { sticky, TaskState } from "../../../typescript/src/index.js";

export default async (env: RoutingEnv): Promise<void> => {
  await env.broker.submit({
    tasks: [
      {
        queue: env.queue,
        payload: utf8.encode("s"),
        retry: { maxAttempts: 3, initialBackoff: durationFromMs(0) },
        sticky: sticky("soft", { timeoutMs: 60_000 }),
      },
    ],
  });
  const got = await leaseAs(env, WORKER_ID);
  check(got.length === 1, `leased ${got.length} tasks, want 1`);
  const first = got[0]!;
  const failed = await env.broker.fail({ taskId: first.taskId, leaseToken: first.leaseToken, errorMessage: "boom" });
  check(
    failed.state === TaskState.READY || failed.state === TaskState.SCHEDULED,
    `Fail: state ${TaskState[failed.state]}, want READY or SCHEDULED`,
  );
  const other = `${WORKER_ID}-other`;
  const stolen = await leaseAs(env, other);
  check(stolen.length === 0, `${other} leased the retry reserved for ${WORKER_ID}`);
  const again = await leaseAs(env, WORKER_ID, {}, 5_000);
  check(
    again.length === 1 && again[0]!.taskId === first.taskId && again[0]!.attempt === 2,
    `${WORKER_ID} leased ${again.length} tasks (attempts ${again.map((t) => t.attempt).join(",")}), want the retry with attempt 2`,
  );
  await complete(env, again[0]!);
};
