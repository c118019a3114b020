/**
 * Typed handlers per queue, middleware, completed/failed listeners, the metrics they produce,
 * the options a Worker or Client refuses, SIGTERM handling and `await using`.
 */
import assert from "node:assert/strict";
import { afterEach, beforeEach, test } from "node:test";
import { Client, handler, PermanentError, Worker, type Middleware, type TaskContext } from "../src/index.js";
import { Metrics } from "../conformance/metric_reader.js";
import { FakeBroker, until } from "./fake-broker.js";

let fake: FakeBroker;
let addr: string;
const text = new TextDecoder();
const utf8 = new TextEncoder();

beforeEach(async () => {
  fake = new FakeBroker();
  addr = await fake.start();
});

afterEach(async () => {
  await fake.close();
});

interface Email {
  to: string;
  n: number;
}
interface Report {
  n: number;
}

const quiet = { workerId: "w1", pollWaitMs: 1_000, onError: () => {}, logger: { warn() {}, error() {} } };

test("one worker runs a typed handler per queue; middleware sees each task and outcome; metrics count them", async () => {
  const a = fake.add(JSON.stringify({ to: "a@example.com", n: 1 }), 1, "emails");
  const b = fake.add(JSON.stringify({ n: 2 }), 1, "reports");
  const metrics = new Metrics();
  const seen: string[] = [];
  const order: string[] = [];
  const outer: Middleware = async (ctx, next) => {
    order.push("outer");
    const result = await next();
    seen.push(`${ctx.queue}:${JSON.stringify(result)}`);
    return result;
  };
  const inner: Middleware = async (_ctx, next) => {
    order.push("inner");
    return next();
  };
  const client = new Client(addr);
  const w = new Worker(client, { ...quiet, middleware: [outer], meterProvider: metrics.provider })
    .handle<Email, { ok: boolean; n: number }>("emails", async (email) => {
      assert.equal(email.to, "a@example.com");
      return { ok: true, n: email.n };
    })
    .handle<Report, { ok: boolean; n: number }>("reports", (report) => ({ ok: true, n: report.n }))
    .use(inner);
  const completed: string[] = [];
  w.on("completed", (ctx, result) => completed.push(`${ctx.taskId}=${JSON.stringify(result)}`));
  assert.deepEqual(w.queues, ["emails", "reports"]);
  const run = w.run({ handleSignals: false });
  await until(() => fake.completes.length === 2);
  await w.stop();
  await run;
  assert.deepEqual(fake.leases[0]!.queues, ["emails", "reports"], "one Lease asks for every registered queue");
  const results = new Map(fake.completes.map((c) => [c.taskId, text.decode(c.result)]));
  assert.equal(results.get(a), '{"ok":true,"n":1}');
  assert.equal(results.get(b), '{"ok":true,"n":2}');
  assert.deepEqual(seen.sort(), ['emails:{"ok":true,"n":1}', 'reports:{"ok":true,"n":2}']);
  assert.deepEqual(order, ["outer", "inner", "outer", "inner"]);
  assert.deepEqual(completed.sort(), [`${a}={"ok":true,"n":1}`, `${b}={"ok":true,"n":2}`]);
  assert.equal(await metrics.sum("taskbroker.worker.tasks", { queue: "emails", outcome: "succeeded" }), 1);
  assert.equal(await metrics.sum("taskbroker.worker.tasks", { queue: "reports", outcome: "succeeded" }), 1);
  assert.equal(await metrics.count("taskbroker.worker.task.duration", { queue: "emails", outcome: "succeeded" }), 1);
  assert.equal(await metrics.sum("taskbroker.worker.settle.calls", { rpc: "Complete" }), 2);
  await client.close();
});

test("a payload that does not decode fails the attempt as non-retryable, naming the queue and the type", async () => {
  const bad = fake.add("not json", 1, "emails");
  const invalid = fake.add(JSON.stringify({ to: 5 }), 1, "emails");
  let calls = 0;
  const validate = (v: unknown): Email => {
    if (typeof (v as Email).to !== "string") throw new TypeError("to must be a string");
    return v as Email;
  };
  const failed: string[] = [];
  const w = new Worker(new Client(addr), {
    ...quiet,
    handlers: { emails: handler<Email, void>(async () => void calls++, { type: "Email", validate }) },
  });
  w.on("failed", (ctx, err) => failed.push(`${ctx.taskId}:${(err as Error).name}`));
  const run = w.run({ handleSignals: false });
  await until(() => fake.fails.length === 2);
  await w.stop();
  await run;
  assert.equal(calls, 0, "the handler never ran");
  const byId = new Map(fake.fails.map((f) => [f.taskId, f]));
  assert.equal(byId.get(bad)!.nonRetryable, true);
  assert.match(byId.get(bad)!.errorMessage, /^queue emails: payload is not a valid Email: .*JSON/);
  assert.equal(byId.get(invalid)!.nonRetryable, true);
  assert.equal(byId.get(invalid)!.errorMessage, "queue emails: payload is not a valid Email: to must be a string");
  assert.ok(!byId.get(bad)!.errorMessage.includes("\n"), "one line");
  assert.deepEqual(failed.sort(), [`${bad}:PermanentError`, `${invalid}:PermanentError`].sort());
});

test("a typed result JSON cannot encode fails the attempt at once with a clear error", async () => {
  const id = fake.add("{}", 1, "q");
  const w = new Worker(new Client(addr), { ...quiet, queues: ["q"], handler: async () => ({ big: 1n }) });
  const run = w.run({ handleSignals: false });
  await until(() => fake.fails.length === 1);
  await w.stop();
  await run;
  assert.equal(fake.fails[0]!.taskId, id);
  assert.match(fake.fails[0]!.errorMessage, /^queue q: result cannot be encoded as JSON: .*BigInt/);
  assert.equal(fake.completes.length, 0);
});

test("middleware can replace the outcome: an exception becomes a permanent failure", async () => {
  fake.add("{}", 1, "q");
  const permanent: Middleware = async (_ctx, next) => {
    try {
      return await next();
    } catch (err) {
      throw new PermanentError(`giving up: ${(err as Error).message}`);
    }
  };
  const metrics = new Metrics();
  const w = new Worker(new Client(addr), {
    ...quiet,
    queues: ["q"],
    middleware: [permanent],
    meterProvider: metrics.provider,
    handler: async () => {
      throw new Error("flaky");
    },
  });
  const run = w.run({ handleSignals: false });
  await until(() => fake.fails.length === 1);
  await w.stop();
  await run;
  assert.equal(fake.fails[0]!.nonRetryable, true);
  assert.equal(fake.fails[0]!.errorMessage, "giving up: flaky");
  assert.equal(await metrics.sum("taskbroker.worker.tasks", { queue: "q", outcome: "failed" }), 1);
  assert.equal(await metrics.sum("taskbroker.worker.settle.calls", { rpc: "Fail" }), 1);
});

test("a lease lost while the handler runs counts as lease_lost", async () => {
  const id = fake.add("{}", 1, "q");
  const metrics = new Metrics();
  let started!: () => void;
  const running = new Promise<void>((r) => (started = r));
  const w = new Worker(new Client(addr), {
    ...quiet,
    queues: ["q"],
    heartbeatIntervalMs: 50,
    meterProvider: metrics.provider,
    handler: async (_data: unknown, ctx: TaskContext) => {
      started();
      await new Promise((r) => ctx.signal.addEventListener("abort", r, { once: true }));
    },
  });
  const run = w.run({ handleSignals: false });
  await running;
  fake.lostIds.add(id);
  await until(() => w.inFlight === 0);
  await w.stop();
  await run;
  assert.equal(await metrics.sum("taskbroker.worker.leases.lost", { queue: "q" }), 1);
  assert.equal(await metrics.sum("taskbroker.worker.tasks", { queue: "q", outcome: "lease_lost" }), 1);
  assert.equal(fake.completes.length + fake.fails.length, 0);
});

test("bad options are refused with a clear error naming the option", () => {
  const client = new Client(addr);
  const raw = async () => {};
  const cases: [() => unknown, RegExp][] = [
    [() => new Worker(client, raw, { queues: [] }), /queues is empty/],
    [() => new Worker(client, raw, { queues: ["q", "q"] }), /queue q already has a handler/],
    [() => new Worker(client, raw, { queues: [""] }), /"" is not a queue name/],
    [() => new Worker(client, raw, { queues: ["q"], concurrency: 0 }), /concurrency must be an integer from 1 to 256/],
    [() => new Worker(client, raw, { queues: ["q"], concurrency: -3 }), /concurrency/],
    [() => new Worker(client, raw, { queues: ["q"], concurrency: 2.5 }), /concurrency/],
    [() => new Worker(client, raw, { queues: ["q"], concurrency: 257 }), /concurrency/],
    [() => new Worker(client, raw, { queues: ["q"], leaseDurationMs: 0 }), /leaseDurationMs must be 1 s to 24 h/],
    [() => new Worker(client, raw, { queues: ["q"], leaseDurationMs: Number.NaN }), /leaseDurationMs/],
    [() => new Worker(client, raw, { queues: ["q"], pollWaitMs: -1 }), /pollWaitMs must be 0 to 60 s/],
    [() => new Worker(client, raw, { queues: ["q"], pollWaitMs: 61_000 }), /pollWaitMs/],
    [() => new Worker(client, raw, { queues: ["q"], heartbeatIntervalMs: 0 }), /heartbeatIntervalMs/],
    [() => new Worker(client, raw, { queues: ["q"], heartbeatIntervalMs: 30_000 }), /heartbeatIntervalMs .* below leaseDurationMs/],
    [() => new Worker(client, raw, { queues: ["q"], stopTimeoutMs: -1 }), /stopTimeoutMs must be 0 or more/],
    [() => new Worker(client, { handler: async () => {} }), /handler needs queues/],
    [() => new Worker(client, { queues: ["q"] }), /queues were given without a handler/],
    [() => new Worker(client, {}).run(), /queues is empty/],
    [() => new Worker(client, {}).handle("a", async () => {}).handle("a", async () => {}), /queue a already has a handler/],
    [() => new Worker(client, { handlers: { a: 5 as never } }), /handlers.a is not a function/],
    [() => new Client(""), /address is empty/],
    [() => new Client(addr, { defaultTimeoutMs: -1 }), /defaultTimeoutMs/],
    [() => new Client(addr, { pingIntervalMs: 0 }), /pingIntervalMs/],
  ];
  for (const [make, message] of cases) {
    assert.throws(make, message, `${make.toString()} was not refused with ${message}`);
  }
});

test("handlers cannot be added once the worker runs", async () => {
  fake.add("{}", 1, "q");
  const w = new Worker(new Client(addr), { ...quiet }).handle("q", async () => {});
  const run = w.run({ handleSignals: false });
  assert.throws(() => w.handle("r", async () => {}), /after run\(\)/);
  assert.throws(() => w.use(async (_c, next) => next()), /after run\(\)/);
  await w.stop();
  await run;
});

test("a running worker drains on SIGTERM by default, and only while it runs", async () => {
  const before = process.listenerCount("SIGTERM");
  const w = new Worker(new Client(addr), { ...quiet }).handle("q", async () => {});
  const run = w.run();
  assert.equal(process.listenerCount("SIGTERM"), before + 1);
  await until(() => fake.pendingLeases === 1);
  process.emit("SIGTERM");
  await run; // resolves: the signal stopped it
  assert.equal(process.listenerCount("SIGTERM"), before);

  const off = new Worker(new Client(addr), { ...quiet }).handle("q", async () => {});
  const running = off.run({ handleSignals: false });
  assert.equal(process.listenerCount("SIGTERM"), before);
  await off.stop();
  await running;
});

test("await using stops the worker and closes the client at the end of the scope", async () => {
  fake.add("{}", 1, "q");
  let run: Promise<void>;
  {
    await using client = new Client(addr);
    await using w = new Worker(client, { ...quiet }).handle("q", async () => "done");
    run = w.run({ handleSignals: false });
    await until(() => fake.completes.length === 1);
    assert.equal(fake.connections, 1);
  }
  await run; // already stopped by the scope's end
  await until(() => fake.connections === 0);
  assert.equal(text.decode(fake.completes[0]!.result), '"done"');
});

test("Client.submit encodes typed payloads, and raw bytes go as they are", async () => {
  const client = new Client(addr);
  // The fake broker records a Submit, then refuses it.
  await assert.rejects(client.submit<Email>("emails", { to: "x", n: 1 }, { priority: 3 }), /not faked/);
  await assert.rejects(client.submit("emails", utf8.encode("raw")), /not faked/);
  await assert.rejects(client.submit("emails", { n: 1n }), /payload cannot be encoded as JSON/);
  await client.close();
  const [typed, raw] = fake.submits.map((s) => s.tasks[0]!);
  assert.equal(fake.submits.length, 2, "nothing is sent for a payload that does not encode");
  assert.equal(text.decode(typed!.payload), '{"to":"x","n":1}');
  assert.equal(typed!.queue, "emails");
  assert.equal(typed!.priority, 3);
  assert.equal(text.decode(raw!.payload), "raw");
});
