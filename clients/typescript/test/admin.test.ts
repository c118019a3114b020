/**
 * The Client's operator calls (getTask, listTasks, cancelTask, requeueTask, explainTask) against
 * the live broker at $TASKBROKER_ADDR (scripts/conformance.sh typescript starts one; skipped
 * without it): states and gate kinds by name, times as Dates.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import { Code, ConnectError, connect, optionsFromEnv, target, wait, Worker, type SubmitOptions, type TaskFilter, type TaskInfo, type TaskStateName } from "../src/index.js";

const addr = process.env["TASKBROKER_ADDR"];
const skip = addr ? false : "TASKBROKER_ADDR is not set; needs a live broker";

test("get, list, cancel, requeue and explain a task by state name", { skip }, async () => {
  await using client = connect(addr!, optionsFromEnv({ defaultTimeoutMs: 10_000 }));
  const queue = `test.typescript.admin.${randomBytes(4).toString("hex")}`;
  const { taskId } = await client.submit(queue, { to: "ada" }, { delayMs: 3_600_000 });

  const got = await client.getTask(taskId);
  assert.equal(got.state, "SCHEDULED");
  assert.equal(got.queue, queue);
  assert.deepEqual(JSON.parse(new TextDecoder().decode(got.payload)), { to: "ada" });
  assert.ok(got.runAt instanceof Date && got.runAt.getTime() > Date.now() + 50 * 60_000, `runAt ${got.runAt}`);

  const why = await client.explainTask(taskId);
  assert.equal(why.state, "SCHEDULED");
  assert.deepEqual(why.gates.map((g) => g.kind), ["RUN_AT_IN_FUTURE"]);
  assert.ok(why.gates[0]!.until instanceof Date);

  const listed: TaskInfo[] = [];
  for await (const t of client.listTasks({ queue, states: ["SCHEDULED"] })) listed.push(t);
  assert.deepEqual(listed.map((t) => `${t.id} ${t.state}`), [`${taskId} SCHEDULED`]);
  await assert.rejects(client.listTasks({ states: ["FINISHED" as TaskStateName] }).next(), /filter\.states: unknown task state FINISHED/);

  const cancelled = await client.cancelTask(taskId);
  assert.equal(cancelled.state, "CANCELLED");
  const requeued = await client.requeueTask(taskId);
  assert.equal(requeued.state, "READY");
  assert.deepEqual((await client.explainTask(taskId)).gates.map((g) => g.kind), ["NONE"]);

  const worker = new Worker(client, {}).handle<{ to: string }, string>(queue, async (e) => `sent to ${e.to}`);
  const running = worker.run({ handleSignals: false });
  try {
    await wait(client.admin, taskId, { timeoutMs: 30_000 });
  } finally {
    await worker.close();
    await running;
  }
  const done = await client.getTask(taskId);
  assert.equal(done.state, "SUCCEEDED");
  assert.ok(done.finishedAt instanceof Date);
  assert.equal(await client.getResult<string>(taskId), "sent to ada");
  await assert.rejects(client.requeueTask("no-such-task"));
});

test("listTasks filters by target worker, target labels and metadata", { skip }, async () => {
  await using client = connect(addr!, optionsFromEnv({ defaultTimeoutMs: 10_000 }));
  const queue = `test.typescript.admin.filters.${randomBytes(4).toString("hex")}`;
  const submit = async (options: SubmitOptions = {}) =>
    (await client.submit(queue, "x", { delayMs: 3_600_000, ...options })).taskId;
  const forA = await submit({ target: target({ workerId: "w-a" }) });
  const gpuEu = await submit({ target: target({ labels: { gpu: "a100", zone: "eu" } }) });
  const gpu = await submit({ target: target({ labels: { gpu: "a100" } }) });
  const acme = await submit({ metadata: { "tenant.id": "acme" } });
  const globex = await submit({ metadata: { "tenant.id": "globex", tier: "gold" } });
  const plain = await submit();

  const ids = async (filter: TaskFilter) => {
    const got: string[] = [];
    for await (const t of client.listTasks({ queue, ...filter })) got.push(t.id);
    return got.sort();
  };
  const sorted = (...xs: string[]) => xs.sort();
  assert.deepEqual(await ids({}), sorted(forA, gpuEu, gpu, acme, globex, plain));
  assert.deepEqual(await ids({ targetWorker: "w-a" }), [forA]);
  assert.deepEqual(await ids({ targetWorker: "w-b" }), []);
  assert.deepEqual(await ids({ targetLabels: { gpu: "a100" } }), sorted(gpuEu, gpu));
  assert.deepEqual(await ids({ targetLabels: { gpu: "a100", zone: "eu" } }), [gpuEu]);
  assert.deepEqual(await ids({ metadataKey: "tenant.id" }), sorted(acme, globex));
  assert.deepEqual(await ids({ metadataKey: "tenant.id", metadataValue: "acme" }), [acme]);
  assert.deepEqual(await ids({ metadataKey: "tier", targetWorker: "w-a" }), []);

  await assert.rejects(
    client.listTasks({ queue, metadataValue: "acme" }).next(),
    (err: unknown) => err instanceof ConnectError && err.code === Code.InvalidArgument,
  );
});
