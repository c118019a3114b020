/**
 * The conformance case `dependency_results`, for the TypeScript client: README.md beside this file
 * says what it does and expects.
 */
import { ResultsEnv, WORKER_ID, check, text, utf8 } from "../../../typescript/conformance/results.js";
import { TaskState, wait, Worker } from "../../../typescript/src/index.js";

export default async ({ client, queue }: ResultsEnv): Promise<void> => {
  const a = await client.submit(queue, utf8.encode("a"));
  const b = await client.submit(queue, utf8.encode("b"), { dependsOn: [a.taskId] });
  let seen: Record<string, string> | undefined;
  const worker = new Worker(client, async (ctx) => {
    if (ctx.taskId === a.taskId) return "a-result";
    seen = Object.fromEntries(Object.entries(ctx.dependencyResults).map(([id, r]) => [id, text.decode(r)]));
    return ctx.dependencyResults[a.taskId];
  }, { queues: [queue], workerId: WORKER_ID, pollWaitMs: 1_000, onError: () => {} });
  const run = worker.run({ handleSignals: false });
  try {
    await wait(client, b.taskId, { timeoutMs: 20_000 });
  } finally {
    await worker.stop(5_000);
    await run;
  }
  const want = JSON.stringify({ [a.taskId]: "a-result" });
  check(JSON.stringify(seen) === want, `b's handler saw dependency_results ${JSON.stringify(seen)}, want ${want}`);
  const tb = (await client.admin.getTask({ taskId: b.taskId })).task!;
  check(
    tb.state === TaskState.SUCCEEDED && text.decode(tb.result) === "a-result",
    `b is ${TaskState[tb.state]} with result ${JSON.stringify(text.decode(tb.result))}, want SUCCEEDED with a-result`,
  );
};
