/**
 * The conformance case `worker_id_binding`, for the TypeScript client: README.md beside this file
 * says what it does and expects.
 */
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { BindingEnv, WORKER_ID, check, within } from "../../../typescript/conformance/binding.js";
import { connect, optionsFromEnv, TaskState, Worker, WorkerStoppedError } from "../../../typescript/src/index.js";

export default async (env: BindingEnv): Promise<void> => {
  const q = env.queue;
  const sub = await env.broker.submit({ tasks: [{ queue: q, payload: new TextEncoder().encode("bound") }] });
  const id = sub.results[0]!.taskId;
  const token = process.env["TASKBROKER_WORKER_TOKEN"];
  const broker = token
    ? connect(process.env["TASKBROKER_ADDR"]!, { ...optionsFromEnv({ defaultTimeoutMs: 10_000 }), token }).broker
    : env.broker;
  const leaseAs = (workerId: string) =>
    broker.lease({ workerId, queues: [q], maxTasks: 1, leaseDuration: durationFromMs(30_000) });
  const allowed = `${WORKER_ID}-bound-1`;
  const got = (await leaseAs(allowed)).tasks;
  check(got.length === 1 && got[0]!.taskId === id, `Lease as ${allowed} returned ${got.length} tasks, want ${id}`);
  if (token) {
    let err: unknown;
    try {
      await leaseAs(WORKER_ID);
    } catch (e) {
      err = e;
    }
    check(err !== undefined, `Lease as ${WORKER_ID}: OK, want PermissionDenied`);
    const ce = ConnectError.from(err);
    check(
      ce.code === Code.PermissionDenied && ce.rawMessage.includes("worker_id"),
      `Lease as ${WORKER_ID}: ${Code[ce.code]} (${ce.rawMessage}), want PermissionDenied naming worker_id`,
    );
  }
  await broker.complete({ taskId: id, leaseToken: got[0]!.leaseToken });
  const s = (await env.admin.getTask({ taskId: id })).task?.state;
  check(s === TaskState.SUCCEEDED, `the task is ${String(s)}, want SUCCEEDED`);
  if (!token) return;
  const w = new Worker(broker, async () => {}, {
    queues: [q],
    workerId: WORKER_ID,
    pollWaitMs: 1_000,
    onError: () => {},
  });
  let err: unknown;
  try {
    await within(20_000, w.run(), "the worker kept running");
  } catch (e) {
    err = e;
  } finally {
    await w.close();
  }
  check(
    err instanceof WorkerStoppedError && err.code === Code.PermissionDenied,
    `Worker as ${WORKER_ID}: run() ended with ${String(err)}, want WorkerStoppedError PermissionDenied`,
  );
};
