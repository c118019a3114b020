/**
 * lease_next against the live broker at $TASKBROKER_ADDR (scripts/conformance.sh
 * typescript starts one; skipped without it): each settle brings the freed slot's next task.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import { connect, optionsFromEnv, PermanentError, TaskState, Worker, type TaskContext } from "../src/index.js";

const addr = process.env["TASKBROKER_ADDR"];
const skip = addr ? false : "TASKBROKER_ADDR is not set; needs a live broker";
const text = new TextDecoder();
const utf8 = new TextEncoder();

function client() {
  return connect(addr!, optionsFromEnv({ defaultTimeoutMs: 10_000 }));
}

async function submit(queue: string, n: number): Promise<string[]> {
  const tasks = Array.from({ length: n }, (_, i) => ({ queue, payload: utf8.encode(String(i)) }));
  return (await client().broker.submit({ tasks })).results.map((r) => r.taskId);
}

async function states(ids: string[]): Promise<TaskState[]> {
  const { admin } = client();
  return Promise.all(ids.map(async (taskId) => (await admin.getTask({ taskId })).task!.state));
}

async function settled(ids: string[]): Promise<void> {
  for (let i = 0; i < 300; i++) {
    const s = await states(ids);
    if (s.every((x) => x === TaskState.SUCCEEDED || x === TaskState.DEAD)) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`tasks not settled: ${(await states(ids)).map((s) => TaskState[s])}`);
}

function newWorker(queue: string, handler: (ctx: TaskContext) => Promise<string | void>, leaseNext?: boolean) {
  return new Worker(client().broker, handler, {
    queues: [queue],
    workerId: "test-typescript",
    concurrency: 1,
    pollWaitMs: 1_000,
    ...(leaseNext === undefined ? {} : { leaseNext }),
  });
}

for (const leaseNext of [undefined, false]) {
  test(`lease_next ${leaseNext ?? "(default)"}: concurrency 1 runs each task once`, { skip }, async () => {
    const queue = `test.typescript.leasenext.${randomBytes(4).toString("hex")}`;
    const ids = await submit(queue, 8);
    const seen: string[] = [];
    const w = newWorker(
      queue,
      async (ctx) => {
        const p = text.decode(ctx.payload);
        seen.push(p);
        if (p === "3") throw new PermanentError("bad input"); // a Fail carries lease_next too
        return "ok";
      },
      leaseNext,
    );
    const run = w.run();
    await settled(ids);
    await w.stop();
    await run;
    assert.deepEqual([...seen].sort(), ["0", "1", "2", "3", "4", "5", "6", "7"]);
    // Concurrency 1 over ready tasks: only the first needs a Lease.
    assert.equal(w.leaseNextTasks, leaseNext === false ? 0 : ids.length - 1);
  });
}

test("stopping mid-stream leaves the rest READY", { skip }, async () => {
  const queue = `test.typescript.leasenextstop.${randomBytes(4).toString("hex")}`;
  const ids = await submit(queue, 10);
  const ran: string[] = [];
  let third!: () => void;
  const thirdRuns = new Promise<void>((r) => (third = r));
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  const w = newWorker(queue, async (ctx) => {
    ran.push(ctx.taskId);
    if (ran.length === 3) {
      third();
      await released;
    }
    return "ok";
  });
  const run = w.run();
  await thirdRuns;
  const stopped = w.stop(); // while the third task runs: its Complete must not lease another
  release();
  await stopped;
  await run;
  assert.equal(new Set(ran).size, 3);
  assert.equal(ran.length, 3);
  const s = await states(ids);
  ids.forEach((id, i) => {
    assert.equal(TaskState[s[i]!], TaskState[ran.includes(id) ? TaskState.SUCCEEDED : TaskState.READY], `task ${id}`);
  });
});
