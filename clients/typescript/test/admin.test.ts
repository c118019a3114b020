/**
 * The Client's operator calls (getTask, listTasks, cancelTask, requeueTask, explainTask) against
 * the live broker at $TASKBROKER_ADDR (scripts/conformance.sh typescript starts one; skipped
 * without it): states and gate kinds by name, times as Dates.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import { connect, optionsFromEnv, wait, Worker, type TaskInfo, type TaskStateName } from "../src/index.js";

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
