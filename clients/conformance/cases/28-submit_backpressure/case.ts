/**
 * The conformance case `submit_backpressure`, for the TypeScript client: README.md beside this
 * file says what it does and expects.
 */
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { ResultsEnv, WORKER_ID, check, text, utf8 } from "../../../typescript/conformance/results.js";
import { QuotaFailureSchema, RetryInfoSchema, connect, optionsFromEnv } from "../../../typescript/src/index.js";

export default async ({ client, queue }: ResultsEnv): Promise<void> => {
  await client.admin.updateQueue({ name: queue, config: { maxPending: 1n }, updateMask: { paths: ["max_pending"] } });
  await client.submit(queue, utf8.encode("1"));
  let refusal: unknown;
  try {
    await client.broker.submit({ tasks: [{ queue, payload: utf8.encode("2") }] });
  } catch (err) {
    refusal = err;
  }
  check(
    refusal instanceof ConnectError && refusal.code === Code.ResourceExhausted,
    `Submit 2 over max_pending answered ${refusal instanceof ConnectError ? Code[refusal.code] : "OK"}, want RESOURCE_EXHAUSTED`,
  );
  const retry = refusal.findDetails(RetryInfoSchema).length;
  const quota = refusal.findDetails(QuotaFailureSchema).length;
  check(retry === 1 && quota === 1, `RESOURCE_EXHAUSTED carries ${retry} RetryInfo and ${quota} QuotaFailure, want one of each`);
  const listed = await client.admin.listTasks({ queue });
  check(listed.tasks.length === 1, `the refused Submit left ${listed.tasks.length} tasks, want 1`);

  // A client whose interceptor says when a Submit through it is first refused.
  let refused!: () => void;
  const firstRefusal = new Promise<void>((resolve) => (refused = resolve));
  const observe: Interceptor = (next) => async (req) => {
    try {
      return await next(req);
    } catch (err) {
      if (err instanceof ConnectError && err.code === Code.ResourceExhausted) refused();
      throw err;
    }
  };
  const watched = connect(process.env["TASKBROKER_ADDR"]!, optionsFromEnv({ defaultTimeoutMs: 10_000, interceptors: [observe] }));
  try {
    const submitted = watched.submit(queue, utf8.encode("2"));
    submitted.catch(() => {}); // awaited below; a case that fails first must not leave it unhandled
    const first = await Promise.race([firstRefusal.then(() => "refused"), submitted.then(() => "submitted")]);
    check(first === "refused", "the client's submit returned before any refusal");
    const leased = await client.broker.lease({
      workerId: WORKER_ID,
      queues: [queue],
      maxTasks: 1,
      leaseDuration: durationFromMs(30_000),
      wait: durationFromMs(0),
    });
    check(
      leased.tasks.length === 1 && text.decode(leased.tasks[0]!.payload) === "1",
      `Lease returned ${leased.tasks.length} tasks, want task 1`,
    );
    await client.broker.complete({ taskId: leased.tasks[0]!.taskId, leaseToken: leased.tasks[0]!.leaseToken });
    const second = await submitted;
    const t2 = (await client.admin.getTask({ taskId: second.taskId })).task!;
    check(text.decode(t2.payload) === "2", `task 2 has payload ${JSON.stringify(text.decode(t2.payload))}`);
  } finally {
    await watched.close();
  }
};
