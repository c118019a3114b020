/**
 * The policy declared with a handler and defineTask (docs/client-spec.md point 20): the pure
 * parts, the Submit a Client sends (the fake broker records it), and against the live broker at
 * $TASKBROKER_ADDR (skipped without it) max_attempts as GetTask reads it, DEAD at attempt 1, and
 * one lease at a time for a queue with concurrency 1.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import { connect, defineTask, optionsFromEnv, TaskFailedError, TaskState, Worker, type TaskContext } from "../src/index.js";
import { applyRetryDefaults, classify, leasePlan } from "../src/policy.js";
import { FakeBroker } from "./fake-broker.js";

const addr = process.env["TASKBROKER_ADDR"];
const skip = addr ? false : "TASKBROKER_ADDR is not set; needs a live broker";
const quiet = { pollWaitMs: 1_000, onError: () => {}, logger: { warn() {}, error() {} } };

class InvalidAddress extends Error {
  override name = "InvalidAddress";
}
interface Email {
  to: string;
}
interface Sent {
  to: string;
  attempt: number;
}

function client() {
  return connect(addr!, optionsFromEnv({ defaultTimeoutMs: 10_000 }));
}
function queue(name: string): string {
  return `test.ts.${name}.${randomBytes(4).toString("hex")}`;
}

test("only the unset retry fields are filled; a full queue is left out of the Lease", () => {
  const table = new Map([["emails", { maxAttempts: 7, backoffMultiplier: 3 }]]);
  const [plain, own, other] = applyRetryDefaults(table, [{ queue: "emails" }, { queue: "emails", retry: { maxAttempts: 2 } }, { queue: "x" }]);
  assert.equal(plain!.retry!.maxAttempts, 7);
  assert.deepEqual([own!.retry!.maxAttempts, own!.retry!.backoffMultiplier], [2, 3]);
  assert.equal(other!.retry, undefined);
  const limits = new Map([["slow", 2]]);
  assert.deepEqual(leasePlan(["slow", "fast"], limits, new Map([["slow", 1]]), 4), { queues: ["slow", "fast"], maxTasks: 1 });
  assert.deepEqual(leasePlan(["slow", "fast"], limits, new Map([["slow", 2]]), 4), { queues: ["fast"], maxTasks: 4 });
  const wrapped = new Error("send failed", { cause: new InvalidAddress("no @") });
  assert.equal((classify({ nonRetryable: [InvalidAddress] }, wrapped) as Error).name, "PermanentError");
  assert.equal(classify({ nonRetryable: [InvalidAddress] }, new Error("x")) instanceof InvalidAddress, false);
});

test("a Client sends a handler's retry defaults with its submits", async () => {
  const fake = new FakeBroker();
  const c = connect(await fake.start());
  try {
    new Worker(c, quiet).handle("emails", () => undefined, { policy: { maxAttempts: 6, backoffMs: 2_000 } });
    // The fake records a Submit and refuses it.
    await assert.rejects(c.submit("emails", { to: "a" }));
    await assert.rejects(c.submit("emails", { to: "b" }, { retry: { maxAttempts: 2 } }));
    const [first, second] = fake.submits.map((s) => s.tasks[0]!.retry!);
    assert.deepEqual([first!.maxAttempts, Number(first!.initialBackoff!.seconds)], [6, 2]);
    assert.deepEqual([second!.maxAttempts, Number(second!.initialBackoff!.seconds)], [2, 2]);
  } finally {
    await fake.close();
  }
});

test("live: the handler's max_attempts reaches the broker and a non-retryable error ends DEAD at attempt 1", { skip }, async () => {
  const c = client();
  const q = queue("nonretryable");
  const w = new Worker(c, quiet).handle<Email, Sent>(
    q,
    (e) => {
      throw new Error(`send to ${e.to} failed`, { cause: new InvalidAddress("bad address") });
    },
    { policy: { maxAttempts: 5, nonRetryable: [InvalidAddress] } },
  );
  const plain = await c.admin.getTask({ taskId: (await c.submit(q + ".idle", {})).taskId });
  assert.equal(plain.task!.maxAttempts, 3, "another queue keeps the broker's default");
  const run = w.run({ handleSignals: false });
  try {
    const def = defineTask<Email, Sent>(q);
    await assert.rejects(def.submitAndWait(c, { to: "ada" }, { timeoutMs: 30_000 }), (err: unknown) => {
      assert.ok(err instanceof TaskFailedError);
      assert.equal(err.state, TaskState.DEAD);
      assert.deepEqual([err.task.attempt, err.task.maxAttempts], [1, 5]);
      return true;
    });
  } finally {
    await w.stop();
    await run;
  }
});

test("live: a queue with concurrency 1 holds one lease at a time", { skip }, async () => {
  const c = client();
  const q = queue("concurrency");
  const ids = [];
  for (let i = 0; i < 3; i++) ids.push((await c.submit(q, i)).taskId);
  let running = 0;
  let peak = 0;
  const gates: Array<() => void> = [];
  let started!: () => void;
  const first = new Promise<void>((r) => (started = r));
  const w = new Worker(c, { ...quiet, concurrency: 4 }).handle<number, number>(
    q,
    async (i) => {
      peak = Math.max(peak, ++running);
      started();
      await new Promise<void>((r) => gates.push(r));
      running--;
      return i;
    },
    { policy: { concurrency: 1 } },
  );
  const run = w.run({ handleSignals: false });
  try {
    await first;
    const states = await Promise.all(ids.map(async (taskId) => (await c.admin.getTask({ taskId })).task!.state));
    assert.equal(states.filter((s) => s === TaskState.LEASED).length, 1, "one slot: one lease");
    for (const id of ids) {
      while (gates.length === 0) await new Promise((r) => setImmediate(r));
      gates.shift()!();
      const { wait } = await import("../src/wait.js");
      await wait(c, id, { timeoutMs: 30_000 });
    }
    assert.equal(peak, 1);
  } finally {
    await w.stop();
    await run;
  }
});

test("live: a task definition types both sides and delays", { skip }, async () => {
  const c = client();
  const emails = defineTask<Email, Sent>(queue("def"), { maxAttempts: 4 });
  const w = new Worker(c, quiet).task(emails, (e: Email, ctx: TaskContext) => ({ to: e.to, attempt: ctx.attempt }));
  const run = w.run({ handleSignals: false });
  try {
    assert.deepEqual(await emails.submitAndWait(c, { to: "a@b.c" }, { timeoutMs: 30_000 }), { to: "a@b.c", attempt: 1 });
  } finally {
    await w.stop();
    await run;
  }
  const later = await c.admin.getTask({ taskId: (await emails.delay(c, { to: "x" }, 3_600_000)).taskId });
  assert.deepEqual([later.task!.state, later.task!.maxAttempts], [TaskState.SCHEDULED, 4]);
  const at = new Date(Date.now() + 7_200_000);
  const fixed = await c.admin.getTask({ taskId: (await emails.runAt(c, { to: "y" }, at)).taskId });
  assert.equal(Number(fixed.task!.runAt!.seconds), Math.floor(at.getTime() / 1000));
});
