/**
 * The worker runtime against FakeBroker: slot-limited leasing, batched heartbeats, error
 * mapping, checkpoint, abort signals and graceful stop.
 */
import assert from "node:assert/strict";
import { afterEach, beforeEach, test } from "node:test";
import { connect, PermanentError, RetryableError, Worker, type TaskContext } from "../src/index.js";
import { FakeBroker, until } from "./fake-broker.js";

let fake: FakeBroker;
let addr: string;
const text = new TextDecoder();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeEach(async () => {
  fake = new FakeBroker();
  addr = await fake.start();
});

afterEach(async () => {
  await fake.close();
});

function worker(
  handler: (ctx: TaskContext) => Promise<string | void>,
  opts: { concurrency?: number; leaseDurationMs?: number; labels?: Record<string, string> } = {},
) {
  const { broker } = connect(addr);
  return new Worker(broker, handler, {
    queues: ["q"],
    workerId: "w1",
    pollWaitMs: 1_000,
    onError: () => {},
    ...opts,
  });
}

test("leases no more tasks than free slots and completes each with its result", async () => {
  for (const p of ["a", "b", "c", "d", "e"]) fake.add(p);
  let running = 0;
  let maxRunning = 0;
  const w = worker(
    async (ctx) => {
      running++;
      maxRunning = Math.max(maxRunning, running);
      await sleep(50);
      running--;
      return `done:${text.decode(ctx.payload)}`;
    },
    { concurrency: 2 },
  );
  const run = w.run();
  await until(() => fake.completes.length === 5);
  await w.stop(1_000);
  await run;
  assert.ok(maxRunning <= 2, `ran ${maxRunning} at once`);
  assert.ok(fake.leases.every((l) => l.maxTasks >= 1 && l.maxTasks <= 2), "asked for more than the free slots");
  assert.equal(fake.leases[0]!.maxTasks, 2);
  assert.deepEqual(fake.completes.map((c) => text.decode(c.result)).sort(), ["done:a", "done:b", "done:c", "done:d", "done:e"]);
  assert.ok(fake.completes.every((c) => c.leaseToken === `tok-${c.taskId}`));
});

test("maps PermanentError, RetryableError and other errors to Fail", async () => {
  const perm = fake.add("perm");
  const retry = fake.add("retry");
  const other = fake.add("other");
  const w = worker(async (ctx) => {
    const p = text.decode(ctx.payload);
    if (p === "perm") throw new PermanentError("bad input");
    if (p === "retry") throw new RetryableError("try later", { retryAfterMs: 2_500 });
    throw new Error("boom");
  });
  const run = w.run();
  await until(() => fake.fails.length === 3);
  await w.stop();
  await run;
  const byId = new Map(fake.fails.map((f) => [f.taskId, f]));
  assert.equal(byId.get(perm)!.nonRetryable, true);
  assert.equal(byId.get(perm)!.errorMessage, "bad input");
  assert.equal(byId.get(retry)!.nonRetryable, false);
  assert.equal(byId.get(retry)!.retryAfter?.seconds, 2n);
  assert.equal(byId.get(retry)!.retryAfter?.nanos, 500_000_000);
  assert.equal(byId.get(other)!.nonRetryable, false);
  assert.equal(byId.get(other)!.retryAfter, undefined);
  assert.equal(fake.completes.length, 0);
});

test("logs a planned retry and a permanent failure at warn in one line, an unexpected error at error with its stack", async () => {
  const planned = fake.add("retry", 1);
  const last = fake.add("retry", 3);
  const perm = fake.add("perm");
  const other = fake.add("other");
  for (const t of fake.tasks) t.maxAttempts = 3;
  const warns: string[] = [];
  const errors: string[] = [];
  const { broker } = connect(addr);
  const w = new Worker(
    broker,
    async (ctx: TaskContext) => {
      const p = text.decode(ctx.payload);
      if (p === "perm") throw new PermanentError("no such order");
      if (p === "retry") throw new RetryableError("backend busy");
      throw new TypeError("undefined is not a function");
    },
    { queues: ["q"], workerId: "w1", pollWaitMs: 1_000, onError: () => {}, logger: { warn: (m) => warns.push(m), error: (m) => errors.push(m) } },
  );
  const run = w.run();
  await until(() => fake.fails.length === 4);
  await w.stop();
  await run;
  const about = (lines: string[], id: string) => lines.filter((m) => m.includes(`task ${id}:`));
  assert.deepEqual(about(warns, planned), [`taskbroker worker: task ${planned}: attempt 1 of 3 failed, the task will be retried: backend busy`]);
  assert.deepEqual(about(warns, last), [`taskbroker worker: task ${last}: attempt 3 of 3 failed, the task goes DEAD: backend busy`]);
  assert.deepEqual(about(warns, perm), [`taskbroker worker: task ${perm}: failed permanently, the task goes DEAD: no such order`]);
  for (const id of [planned, last, perm]) assert.deepEqual(about(errors, id), [], `task ${id} logged at error`);
  const [line, ...more] = about(errors, other);
  assert.equal(more.length, 0);
  assert.ok(line!.startsWith(`taskbroker worker: task ${other}: handler threw TypeError: undefined is not a function\n`), line);
  assert.ok(line!.includes("worker.test"), `no stack in ${line}`);
  assert.deepEqual(about(warns, other), []);
});

test("heartbeats all running tasks in one call about every third of the lease", async () => {
  for (const p of ["a", "b", "c"]) fake.add(p);
  const w = worker(async () => void (await sleep(1_300)), { concurrency: 3, leaseDurationMs: 1_500 });
  const run = w.run();
  await until(() => fake.completes.length === 3, 5_000);
  await w.stop();
  await run;
  assert.ok(fake.heartbeats.length >= 2, `${fake.heartbeats.length} heartbeats`);
  const first = fake.heartbeats[0]!;
  assert.equal(first.leases.length, 3);
  assert.equal(first.workerId, "w1");
  assert.equal(first.extendBy?.seconds, 1n);
  assert.equal(first.extendBy?.nanos, 500_000_000);
});

test("aborts the signal on cancel_requested and reports the thrown error", async () => {
  const id = fake.add("x");
  fake.cancelIds.add(id);
  let kind: string | undefined;
  const w = worker(
    async (ctx) => {
      await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve));
      kind = ctx.abortKind;
      ctx.signal.throwIfAborted();
    },
    { leaseDurationMs: 1_000 },
  );
  const run = w.run();
  await until(() => fake.fails.length === 1);
  await w.stop();
  await run;
  assert.equal(kind, "cancelled");
  assert.equal(fake.fails[0]!.taskId, id);
  assert.match(fake.fails[0]!.errorMessage, /cancel requested/);
});

test("a lost lease aborts the signal and nothing is reported", async () => {
  const id = fake.add("x");
  fake.lostIds.add(id);
  let kind: string | undefined;
  const w = worker(
    async (ctx) => {
      await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve));
      kind = ctx.abortKind;
      await assert.rejects(ctx.checkpoint("late"), /lease lost/);
      return "too late";
    },
    { leaseDurationMs: 1_000 },
  );
  const run = w.run();
  await until(() => kind !== undefined);
  await sleep(100);
  await w.stop();
  await run;
  assert.equal(kind, "lost");
  assert.equal(fake.completes.length + fake.fails.length, 0);
});

test("checkpoint stores progress and updates lastCheckpoint; attempt comes from the lease", async () => {
  const id = fake.add("x", 3);
  const seen: { attempt?: number; before?: Uint8Array; after?: string } = {};
  const w = worker(async (ctx) => {
    seen.attempt = ctx.attempt;
    seen.before = ctx.lastCheckpoint;
    await ctx.checkpoint("step-1");
    seen.after = text.decode(ctx.lastCheckpoint!);
  });
  const run = w.run();
  await until(() => fake.completes.length === 1);
  await w.stop();
  await run;
  assert.equal(seen.attempt, 3);
  assert.equal(seen.before, undefined);
  assert.equal(seen.after, "step-1");
  assert.equal(text.decode(fake.checkpoints.get(id)!), "step-1");
});

test("stop() ends the long poll at once and drains running tasks", async () => {
  fake.add("slow");
  let finished = false;
  const w = worker(async () => {
    await sleep(300);
    finished = true;
  });
  const run = w.run();
  await until(() => fake.pendingLeases === 1); // the task runs, the next long poll waits
  const t0 = Date.now();
  await w.stop(5_000);
  await run;
  assert.ok(finished, "stop() returned before the task finished");
  assert.equal(fake.completes.length, 1);
  assert.ok(Date.now() - t0 < 1_000, "stop() waited for the long poll");
});

test("stop() after its timeout aborts handlers with kind stopping", async () => {
  fake.add("stuck");
  let kind: string | undefined;
  const w = worker(async (ctx) => {
    await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve));
    kind = ctx.abortKind;
    throw ctx.signal.reason;
  });
  const run = w.run();
  await until(() => w.inFlight === 1);
  await w.stop(100);
  await run;
  assert.equal(kind, "stopping");
  assert.equal(fake.fails.length, 1);
  assert.match(fake.fails[0]!.errorMessage, /worker stopping/);
});

test("close() of a worker never run resolves at once", async () => {
  const w = worker(async () => {});
  await w.close();
  assert.equal(w.inFlight, 0);
});

test("run({ signal }) drains and resolves when the signal aborts", async () => {
  fake.add("a");
  let finished = false;
  const w = worker(async () => {
    await sleep(100);
    finished = true;
  });
  const ac = new AbortController();
  const run = w.run({ signal: ac.signal });
  await until(() => w.inFlight === 1);
  ac.abort();
  await run;
  assert.ok(finished, "run() resolved before the running task finished");
});

test("sends its labels with every Lease (routing)", async () => {
  fake.add("a");
  const w = worker(async () => "ok", { labels: { gpu: "a100", region: "eu" } });
  const run = w.run();
  await until(() => fake.completes.length === 1);
  await w.stop(1_000);
  await run;
  assert.ok(fake.leases.length >= 1);
  assert.ok(fake.leases.every((l) => l.labels["gpu"] === "a100" && l.labels["region"] === "eu"));
});
