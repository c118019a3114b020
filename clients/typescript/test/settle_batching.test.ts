/**
 * Completions share calls: a lone Complete goes at once; those that queue behind a call in
 * flight go as one CompleteMany, each with the answer its own Complete would have had; a batch
 * refused as a whole goes one by one; the batch limits hold.
 */
import assert from "node:assert/strict";
import { afterEach, beforeEach, test } from "node:test";
import { Client, Code, Worker, connect } from "../src/index.js";
import { Completer, MAX_BATCH } from "../src/completer.js";
import { WorkerMetrics } from "../src/metrics.js";
import { Metrics } from "../conformance/metric_reader.js";
import { FakeBroker, until } from "./fake-broker.js";

let fake: FakeBroker;
let addr: string;

beforeEach(async () => {
  fake = new FakeBroker();
  addr = await fake.start();
});

afterEach(async () => {
  fake.hold = undefined;
  await fake.close();
});

const quiet = { workerId: "w1", pollWaitMs: 1_000, onError: () => {}, logger: { warn() {}, error() {} }, leaseNext: false };

function latch() {
  let open!: () => void;
  const promise = new Promise<void>((r) => (open = r));
  return { promise, open };
}

/** Runs `n` tasks whose handlers return together while the first Complete is held. */
async function batchOf(n: number, metrics: Metrics) {
  const ids = Array.from({ length: n }, (_, i) => fake.add(`{"i":${i}}`));
  const release = latch();
  const gate = latch();
  let started = 0;
  const allStarted = latch();
  const w = new Worker(new Client(addr), { ...quiet, concurrency: n, meterProvider: metrics.provider }).handle(
    "q",
    async (data: { i: number }) => {
      if (++started === n) allStarted.open();
      await release.promise;
      return data.i;
    },
  );
  const run = w.run({ handleSignals: false });
  await allStarted.promise;
  fake.hold = gate.promise;
  release.open();
  await until(() => w.pendingCompletions === n - 1 && fake.completeCalls.length === 1);
  gate.open();
  await until(() => w.inFlight === 0);
  await w.stop();
  await run;
  return ids;
}

test("a lone completion goes at once as a plain Complete", async () => {
  fake.add("{}");
  const metrics = new Metrics();
  const w = new Worker(new Client(addr), { ...quiet, meterProvider: metrics.provider }).handle("q", async () => "ok");
  const run = w.run({ handleSignals: false });
  await until(() => fake.completes.length === 1);
  await w.stop();
  await run;
  assert.equal(fake.completeManys.length, 0);
  assert.equal(await metrics.sum("taskbroker.worker.settle.calls", { rpc: "Complete" }), 1);
});

test("completions queued behind the call in flight go as one CompleteMany", async () => {
  const metrics = new Metrics();
  const ids = await batchOf(10, metrics);
  assert.equal(fake.completeCalls.length, 1);
  assert.equal(fake.completeManys.length, 1);
  const batched = fake.completeManys[0]!.completions;
  assert.equal(batched.length, 9);
  const all = [fake.completeCalls[0]!, ...batched];
  assert.deepEqual(all.map((c) => c.taskId).sort(), [...ids].sort());
  for (const c of all) assert.equal(c.leaseToken, `tok-${c.taskId}`);
  assert.ok(batched.every((c) => c.leaseNext === undefined), "no lease_next inside completions");
  assert.equal(await metrics.sum("taskbroker.worker.settle.calls", { rpc: "Complete" }), 1);
  assert.equal(await metrics.sum("taskbroker.worker.settle.calls", { rpc: "CompleteMany" }), 1);
  assert.equal(await metrics.sum("taskbroker.worker.tasks", { queue: "q", outcome: "succeeded" }), 10);
});

test("each batched completion gets its own answer: a lost lease is lease_lost for that task only", async () => {
  const metrics = new Metrics();
  fake.lostIds.add("t4"); // the fourth task added by batchOf
  await batchOf(5, metrics);
  assert.equal(fake.completeManys.length, 1);
  assert.equal(await metrics.sum("taskbroker.worker.tasks", { queue: "q", outcome: "succeeded" }), 4);
  assert.equal(await metrics.sum("taskbroker.worker.tasks", { queue: "q", outcome: "lease_lost" }), 1);
  assert.equal(await metrics.sum("taskbroker.worker.leases.lost", { queue: "q" }), 1);
});

test("a batch refused as a whole is sent one Complete at a time", async () => {
  fake.refuseMany = Code.Unimplemented;
  const metrics = new Metrics();
  const ids = await batchOf(4, metrics);
  assert.equal(fake.completeManys.length, 1);
  assert.deepEqual(fake.completeCalls.map((c) => c.taskId).sort(), [...ids].sort());
  assert.equal(await metrics.sum("taskbroker.worker.settle.calls", { rpc: "Complete" }), 4);
  assert.equal(await metrics.sum("taskbroker.worker.tasks", { queue: "q", outcome: "succeeded" }), 4);
});

test("a batch that meets an unreachable broker is retried, each completion by its own settle retry", async () => {
  fake.unavailable.set("completeMany", 1);
  const metrics = new Metrics();
  const ids = await batchOf(4, metrics);
  // The unreachable call never reached the fake: every completion recorded was answered.
  assert.deepEqual([...new Set(fake.completes.map((c) => c.taskId))].sort(), [...ids].sort());
  assert.equal(await metrics.sum("taskbroker.worker.settle.retries", { queue: "q" }), 3);
  assert.equal(await metrics.sum("taskbroker.worker.tasks", { queue: "q", outcome: "succeeded" }), 4);
});

test("a batch holds at most 256 completions and stops at 1 MiB of results", async () => {
  const { broker } = connect(addr);
  const completer = new Completer(broker, new WorkerMetrics(), { signal: new AbortController().signal, timeoutMs: 10_000 });
  const gate = latch();
  fake.hold = gate.promise;
  const first = completer.complete({ taskId: "first", leaseToken: "x" });
  await until(() => fake.completeCalls.length === 1);
  const many = Array.from({ length: MAX_BATCH + 44 }, (_, i) => completer.complete({ taskId: `m${i}`, leaseToken: "x" }));
  assert.equal(completer.pending, MAX_BATCH + 44);
  gate.open();
  await Promise.all([first, ...many]);
  assert.deepEqual(
    fake.completeManys.map((m) => m.completions.length),
    [MAX_BATCH, 44],
  );

  fake.completeManys.length = 0;
  const gate2 = latch();
  fake.hold = gate2.promise;
  const lone = completer.complete({ taskId: "lone", leaseToken: "x" });
  await until(() => fake.completeCalls.length === 2);
  const big = new Uint8Array(600 * 1024);
  const heavy = [0, 1, 2].map((i) => completer.complete({ taskId: `h${i}`, leaseToken: "x", result: big }));
  gate2.open();
  const answers = await Promise.all([lone, ...heavy]);
  assert.ok(answers.every((a) => a.error === undefined));
  // 600 KiB, then 1.2 MiB reached: two in the batch; the third goes alone.
  assert.deepEqual(fake.completeManys.map((m) => m.completions.length), [2]);
  assert.equal(fake.completeCalls.at(-1)!.taskId, "h2");
});
