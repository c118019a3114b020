/**
 * The conformance case `dead_result`, for the TypeScript client: README.md beside this file says
 * what it does and expects.
 */
import { ResultsEnv, WORKER_ID, check } from "../../../typescript/conformance/results.js";
import { TaskState, PermanentError, TaskFailedError, wait, Worker } from "../../../typescript/src/index.js";

export default async ({ client, queue }: ResultsEnv): Promise<void> => {
  const d = await client.submit(queue, "order-7");
  const quiet = { warn() {}, error() {} };
  const worker = new Worker(client, async () => {
    throw new PermanentError("no such order");
  }, { queues: [queue], workerId: WORKER_ID, pollWaitMs: 1_000, onError: () => {}, logger: quiet });
  const run = worker.run({ handleSignals: false });
  let waited: unknown;
  try {
    await wait(client, d.taskId, { timeoutMs: 20_000 });
  } catch (e) {
    waited = e;
  } finally {
    await worker.stop(5_000);
    await run;
  }
  let read: unknown;
  try {
    await client.getResult(d.taskId);
  } catch (e) {
    read = e;
  }
  for (const [what, e] of [["wait", waited], ["getResult", read]] as const) {
    check(e instanceof TaskFailedError, `${what} ended with ${String(e)}, want a TaskFailedError`);
    check(
      e.taskId === d.taskId && e.state === TaskState.DEAD && e.lastError === "no such order",
      `${what}: TaskFailedError {${e.taskId}, ${TaskState[e.state]}, ${JSON.stringify(e.lastError)}}, want {${d.taskId}, DEAD, "no such order"}`,
    );
  }
};
