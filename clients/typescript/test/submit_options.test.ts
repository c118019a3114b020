/** What `Client.submit` and `taskSpec` put in a TaskSpec's runAt and deadline: Dates, and a delay from the client's clock. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, taskSpec, timestampFromDate, timestampFromMs, timestampMs } from "../src/index.js";
import { FakeBroker } from "./fake-broker.js";

const payload = new Uint8Array([1]);

test("taskSpec makes delayMs a runAt of the given clock plus the delay", () => {
  const spec = taskSpec("q", payload, { delayMs: 90_000, priority: 3 }, 1_700_000_000_123);
  assert.deepEqual(spec.runAt, timestampFromMs(1_700_000_090_123));
  assert.equal(spec.priority, 3);
  assert.equal(spec.queue, "q");
  assert.equal("delayMs" in spec, false, "delayMs is not a TaskSpec field");
});

test("taskSpec takes runAt and deadline as Dates or Timestamps, and refuses runAt with delayMs", () => {
  const at = new Date("2031-05-06T07:08:09.123Z");
  assert.deepEqual(taskSpec("q", payload, { runAt: at, deadline: at }).runAt, timestampFromDate(at));
  assert.deepEqual(taskSpec("q", payload, { deadline: at }).deadline, timestampFromDate(at));
  assert.deepEqual(taskSpec("q", payload, { runAt: timestampFromDate(at) }).runAt, timestampFromDate(at));
  assert.equal(taskSpec("q", payload, {}).runAt, undefined);
  assert.throws(() => taskSpec("q", payload, { runAt: at, delayMs: 1 }), /runAt or delayMs/);
  assert.throws(() => taskSpec("q", payload, { delayMs: Number.NaN }), /delayMs/);
});

test("Client.submit sends delayMs as runAt = its clock when called + the delay", async () => {
  const fake = new FakeBroker();
  const addr = await fake.start();
  const client = new Client(addr);
  try {
    const before = Date.now();
    // The fake broker records the Submit, then refuses it.
    await assert.rejects(client.submit("q", { n: 1 }, { delayMs: 90_000 }));
    const after = Date.now();
    const runAt = fake.submits[0]!.tasks[0]!.runAt!;
    assert.ok(timestampMs(runAt) >= before + 90_000 && timestampMs(runAt) <= after + 90_000, `runAt ${timestampMs(runAt)} not in [${before + 90_000}, ${after + 90_000}]`);
  } finally {
    await client.close();
    await fake.close();
  }
});

test("Client.submit sends checkpoint, even an empty one, and leaves it unset otherwise", async () => {
  const fake = new FakeBroker();
  const addr = await fake.start();
  const client = new Client(addr);
  try {
    const seed = new Uint8Array([0x73, 0x74, 0x65, 0x70, 0xff]);
    // The fake broker records each Submit, then refuses it.
    await assert.rejects(client.submit("q", { n: 1 }, { checkpoint: seed }));
    await assert.rejects(client.submit("q", { n: 2 }, { checkpoint: new Uint8Array() }));
    await assert.rejects(client.submit("q", { n: 3 }));
    const sent = fake.submits.map((s) => s.tasks[0]!.checkpoint);
    assert.deepEqual(sent[0], seed);
    assert.deepEqual(sent[1], new Uint8Array(), "an empty checkpoint is a checkpoint");
    assert.equal(sent[2], undefined);
  } finally {
    await client.close();
    await fake.close();
  }
});
