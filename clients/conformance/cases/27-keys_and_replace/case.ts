/**
 * The conformance case `keys_and_replace`, for the TypeScript client: README.md beside this file
 * says what it does and expects.
 */
import { durationFromMs, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { ResultsEnv, WORKER_ID, check, text, utf8 } from "../../../typescript/conformance/results.js";
import { TaskState, DuplicateKeyPolicy } from "../../../typescript/src/index.js";

export default async ({ client, queue }: ResultsEnv): Promise<void> => {
  const lease = (waitMs: number) =>
    client.broker.lease({
      workerId: WORKER_ID,
      queues: [queue],
      maxTasks: 10,
      leaseDuration: durationFromMs(30_000),
      wait: durationFromMs(waitMs),
    });
  const state = async (taskId: string) => (await client.admin.getTask({ taskId })).task!.state;

  const b = await client.submit(queue, utf8.encode("b"), { dependsOnKeys: [{ queue, key: "k-a" }] });
  const blocked = await state(b.taskId);
  check(blocked === TaskState.BLOCKED, `b is ${TaskState[blocked]} before k-a exists, want BLOCKED`);

  const now = Date.now();
  const d1 = await client.submit(queue, utf8.encode("v1"), { key: "digest", runAt: timestampFromMs(now + 3_600_000) });
  const d2 = await client.submit(queue, utf8.encode("v2"), {
    key: "digest",
    runAt: timestampFromMs(now),
    onDuplicateKey: DuplicateKeyPolicy.REPLACE_WAITING,
  });
  check(
    d2.taskId === d1.taskId && d2.deduplicated && d2.replaced,
    `the second submit of digest answered ${d2.taskId} deduplicated=${d2.deduplicated} replaced=${d2.replaced}, want ${d1.taskId} deduplicated=true replaced=true`,
  );

  const a = await client.submit(queue, utf8.encode("a"), { key: "k-a" });
  const first = await lease(0);
  const got = first.tasks.map((t) => `${t.taskId}=${text.decode(t.payload)}`).sort().join(",");
  const want = [`${a.taskId}=a`, `${d1.taskId}=v2`].sort().join(",");
  check(got === want, `the first Lease returned [${got}], want [${want}] (a, and d with payload v2)`);
  for (const t of first.tasks) {
    await client.broker.complete({
      taskId: t.taskId,
      leaseToken: t.leaseToken,
      ...(t.taskId === a.taskId ? { result: utf8.encode("a-result") } : {}),
    });
  }
  const ready = await state(b.taskId);
  check(ready === TaskState.READY, `b is ${TaskState[ready]} after a's Complete, want READY`);

  const second = await lease(5_000);
  check(
    second.tasks.length === 1 && second.tasks[0]!.taskId === b.taskId,
    `the second Lease returned [${second.tasks.map((t) => text.decode(t.payload)).join(",")}], want exactly b`,
  );
  const tb = second.tasks[0]!;
  const results = JSON.stringify(Object.fromEntries(Object.entries(tb.dependencyResults).map(([id, r]) => [id, text.decode(r)])));
  const wantResults = JSON.stringify({ [a.taskId]: "a-result" });
  check(results === wantResults, `b's dependency_results ${results}, want ${wantResults}`);
  await client.broker.complete({ taskId: tb.taskId, leaseToken: tb.leaseToken });
};
