/**
 * The worker runtime under faults (docs/client-spec.md point 11) against FakeBroker: settles
 * retried across an outage, the stop bound and hand-back, the local clock telling a handler its
 * lease expired, call deadlines, wrong result types and the logging rule.
 */
import assert from "node:assert/strict";
import { afterEach, beforeEach, test } from "node:test";
import { connect, Worker, type Logger, type TaskContext } from "../src/index.js";
import { FakeBroker, until } from "./fake-broker.js";

let fake: FakeBroker;
let addr: string;

beforeEach(async () => {
  fake = new FakeBroker();
  addr = await fake.start();
});

afterEach(async () => {
  await fake.close();
});

class Lines implements Logger {
  readonly warns: string[] = [];
  readonly errors: string[] = [];
  warn(m: string) {
    this.warns.push(m);
  }
  error(m: string) {
    this.errors.push(m);
  }
}

function worker(handler: (ctx: TaskContext) => Promise<unknown>, log: Lines, opts: { leaseDurationMs?: number; stopTimeoutMs?: number } = {}) {
  const { broker } = connect(addr);
  return new Worker(broker, handler as (ctx: TaskContext) => Promise<string>, {
    queues: ["q"],
    workerId: "w1",
    pollWaitMs: 1_000,
    onError: () => {},
    logger: log,
    ...opts,
  });
}

test("a Complete is retried across an outage longer than five tries, within the lease", async () => {
  const id = fake.add("x");
  fake.unavailable.set("complete", 6);
  const log = new Lines();
  const w = worker(async () => "done", log);
  const run = w.run();
  await until(() => fake.completes.length === 1, 25_000);
  await w.stop(1_000);
  await run;
  assert.equal(fake.completes[0]!.taskId, id);
  assert.equal(new TextDecoder().decode(fake.completes[0]!.result), "done");
  assert.ok(log.warns.some((m) => m.includes("connection refused")), "retries are logged with their cause");
});

test("stop() hands back the task of a handler that ignores its signal, and returns", async () => {
  const id = fake.add("x");
  let started!: () => void;
  const running = new Promise<void>((r) => (started = r));
  let release!: () => void;
  const latch = new Promise<void>((r) => (release = r));
  const log = new Lines();
  const w = worker(async () => {
    started();
    await latch;
    return "late";
  }, log);
  const run = w.run();
  await running;
  await w.stop(500);
  await run;
  assert.equal(fake.fails.length, 1);
  const f = fake.fails[0]!;
  assert.equal(f.taskId, id);
  assert.equal(f.nonRetryable, false);
  assert.equal(Number(f.retryAfter?.seconds ?? -1n), 0, "retry_after 0: READY at once");
  assert.equal(log.warns.filter((m) => m.includes(id)).length, 1);
  release();
  await new Promise((r) => setImmediate(r));
  assert.equal(fake.completes.length, 0, "a handed-back task's late result is discarded");
});

test("stop() returns when the broker freezes during the hand-back", async () => {
  fake.add("x");
  let started!: () => void;
  const running = new Promise<void>((r) => (started = r));
  const w = worker(async () => {
    started();
    await new Promise(() => {});
  }, new Lines());
  const run = w.run();
  await running;
  fake.frozen.add("fail");
  fake.frozen.add("heartbeat");
  await w.stop(200); // without a deadline on the hand-back this would wait forever
  await run;
});

test("the local clock aborts the signal when the lease expires without heartbeat answers", async () => {
  const id = fake.add("x");
  fake.leaseMs = 1_000;
  fake.frozen.add("heartbeat");
  const log = new Lines();
  let kind: string | undefined;
  const w = worker(
    async (ctx) => {
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 20_000);
        ctx.signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
      });
      kind = ctx.abortKind;
      return "late";
    },
    log,
    { leaseDurationMs: 30_000 },
  );
  const run = w.run();
  await until(() => kind !== undefined, 25_000);
  fake.frozen.delete("heartbeat");
  await w.stop(1_000);
  await run;
  assert.equal(kind, "lost");
  assert.equal(fake.completes.length, 0, "an expired lease is never settled");
  assert.equal(log.warns.filter((m) => m.includes(id)).length, 1, "logged once");
});

test("Complete, Fail and Checkpoint carry the 10 s call deadline", async () => {
  fake.add("ok");
  fake.add("fail");
  const w = worker(async (ctx) => {
    await ctx.checkpoint("c");
    if (new TextDecoder().decode(ctx.payload) === "fail") throw new Error("boom");
    return "done";
  }, new Lines());
  const run = w.run();
  await until(() => fake.completes.length === 1 && fake.fails.length === 1);
  await w.stop(1_000);
  await run;
  for (const m of ["complete", "fail", "checkpoint"]) {
    const d = fake.deadlines.get(m);
    assert.ok(d !== undefined && d > 5_000 && d <= 10_000, `${m} deadline ${d}`);
  }
});

test("a Submit through connect() carries the 10 s call deadline by default", async () => {
  const { broker } = connect(addr);
  await assert.rejects(broker.submit({ tasks: [] })); // the fake does not implement it
  const d = fake.deadlines.get("submit");
  assert.ok(d !== undefined && d <= 10_000, `submit deadline ${d}`);
});

test("a handler result of the wrong type fails the task at once, naming the type", async () => {
  const obj = fake.add("object");
  const num = fake.add("number");
  const log = new Lines();
  const w = worker(async (ctx) => (new TextDecoder().decode(ctx.payload) === "object" ? { a: 1 } : 42), log);
  const run = w.run();
  await until(() => fake.fails.length === 2);
  await w.stop(1_000);
  await run;
  const byId = new Map(fake.fails.map((f) => [f.taskId, f]));
  assert.match(byId.get(obj)!.errorMessage, /handler returned a plain object/);
  assert.match(byId.get(num)!.errorMessage, /handler returned a number/);
  assert.equal(byId.get(obj)!.nonRetryable, false);
  assert.equal(fake.completes.length, 0);
  assert.equal(log.errors.filter((m) => m.includes(obj)).length, 1);
});

test("a handler's exception is logged at error with its message and stack", async () => {
  const thrown = fake.add("throw");
  const log = new Lines();
  const w2 = worker(async () => {
    throw new Error("kaboom");
  }, log);
  const run = w2.run();
  await until(() => fake.fails.length === 1);
  await w2.stop(1_000);
  await run;
  const line = log.errors.find((m) => m.includes(thrown));
  assert.ok(line && line.includes("kaboom") && line.includes("faults.test"), `error line ${line}`);
});
