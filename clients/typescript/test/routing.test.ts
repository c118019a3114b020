/** Routing in the TypeScript client: worker labels on every Lease, preferSameWorker
 * on Fail, and the target / sticky / fanout builders. */
import assert from "node:assert/strict";
import { afterEach, beforeEach, test } from "node:test";
import { connect, fanout, RetryableError, sticky, StickyStrategy, target, Worker } from "../src/index.js";
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

test("sends the worker's labels on every Lease and preferSameWorker on Fail", async () => {
  fake.add("a");
  fake.add("b");
  const { broker } = connect(addr);
  const w = new Worker(
    broker,
    async (ctx) => {
      if (ctx.task.payload[0] === "a".charCodeAt(0)) {
        throw new RetryableError("local files are here", { preferSameWorker: true });
      }
      throw new Error("plain");
    },
    { queues: ["q"], workerId: "w1", pollWaitMs: 1_000, onError: () => {}, labels: { gpu: "a100", region: "eu" } },
  );
  const run = w.run();
  await until(() => fake.fails.length === 2);
  await w.stop(1_000);
  await run;
  assert.ok(fake.leases.length >= 1);
  for (const l of fake.leases) assert.deepEqual({ ...l.labels }, { gpu: "a100", region: "eu" });
  const byId = new Map(fake.fails.map((f) => [f.taskId, f]));
  assert.equal(byId.get("t1")!.preferSameWorker, true);
  assert.equal(byId.get("t2")!.preferSameWorker, false);
});

test("refuses more than 32 labels", () => {
  const { broker } = connect(addr);
  const labels = Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${i}`, "v"]));
  assert.throws(() => new Worker(broker, async () => {}, { queues: ["q"], labels }), /at most 32/);
});

test("builders fill the routing messages", () => {
  const t = target({ workerId: "w-1", labels: { gpu: "a100" } });
  assert.equal(t.workerId, "w-1");
  assert.deepEqual({ ...t.labels }, { gpu: "a100" });
  const s = sticky("soft", { timeoutMs: 1_500 });
  assert.equal(s.strategy, StickyStrategy.SOFT);
  assert.equal(s.timeout!.seconds, 1n);
  assert.equal(s.timeout!.nanos, 500_000_000);
  assert.equal(sticky("hard").timeout, undefined);
  const f = fanout(6, { distinctWorkers: true });
  assert.equal(f.copies, 6);
  assert.equal(f.distinctWorkers, true);
  assert.throws(() => target({}), /workerId or labels/);
  assert.throws(() => fanout(0), /1 to 1000/);
  assert.throws(() => sticky("hard", { timeoutMs: 5 }), /no timeout/);
});
