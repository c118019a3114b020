/**
 * The `testing` entry: a handler run on a TestContext and a producer and a worker on a
 * FakeClient, with no broker at all.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import {
  PermanentError,
  RetryableError,
  TaskAbortedError,
  TaskContext,
  TaskFailedError,
  TaskState,
  WaitTimeoutError,
  submitAndWait,
  testing,
  wait,
  waitAll,
  type Middleware,
} from "../src/index.js";

const text = new TextDecoder();

interface Import {
  rows: number;
}

/** Checkpoints after every row and resumes from the last checkpoint. */
async function importRows(job: Import, ctx: TaskContext): Promise<{ rows: number; resumedFrom: number }> {
  const done = ctx.lastCheckpoint ? Number(text.decode(ctx.lastCheckpoint)) : 0;
  if (job.rows < 0) throw new PermanentError("negative row count");
  for (let row = done; row < job.rows; row++) {
    if (ctx.signal.aborted) throw new RetryableError("cancelled", { retryAfterMs: 0 });
    await ctx.checkpoint(String(row + 1));
  }
  if (ctx.task.metadata["flaky"] && ctx.attempt < 2) throw new RetryableError("upstream busy", { retryAfterMs: 5000 });
  return { rows: job.rows, resumedFrom: done };
}

test("a handler runs on a TestContext with no broker", async () => {
  const ctx = new testing.TestContext("imports", { rows: 3 }, { attempt: 2, checkpoint: "1", metadata: { tenant: "a" } });
  assert.ok(ctx instanceof TaskContext);
  assert.deepEqual([ctx.queue, ctx.attempt, ctx.task.metadata["tenant"], text.decode(ctx.lastCheckpoint)], ["imports", 2, "a", "1"]);
  const out = await ctx.run(importRows);
  assert.ok(out.ok);
  assert.deepEqual(out.value, { rows: 3, resumedFrom: 1 });
  assert.equal(text.decode(out.result), '{"rows":3,"resumedFrom":1}');
  assert.deepEqual(ctx.checkpoints.map((c) => text.decode(c)), ["2", "3"]);
  assert.equal(ctx.cancelChecks, 2);
  assert.equal(ctx.outcome, out);

  const flaky = await new testing.TestContext("imports", { rows: 1 }, { metadata: { flaky: "1" } }).run(importRows);
  assert.ok(!flaky.ok && flaky.retryable && flaky.retryAfterMs === 5000 && flaky.errorMessage === "upstream busy");

  const bad = await new testing.TestContext("imports", { rows: -1 }).run(importRows);
  assert.ok(!bad.ok && bad.permanent && bad.error instanceof PermanentError);
  const undecodable = await new testing.TestContext("imports", "not json").run(importRows);
  assert.ok(!undecodable.ok && undecodable.permanent, "a payload that does not decode fails for good");

  // An operator's cancel arrives in a checkpoint's answer.
  const cancelled = new testing.TestContext("imports", { rows: 5 }, { cancelAtCheckpoint: 2 });
  const c = await cancelled.run(importRows);
  assert.ok(!c.ok && c.retryable);
  assert.equal(cancelled.abortKind, "cancelled");
  assert.equal(cancelled.checkpoints.length, 2);

  const lost = new testing.TestContext("imports", { rows: 5 }, { loseLeaseAtCheckpoint: 1 });
  const l = await lost.run(importRows);
  assert.ok(!l.ok && l.leaseLost && l.error instanceof TaskAbortedError);
  assert.equal(lost.abortKind, "lost");

  // After the worker's stop the failure hands the task back: retry at once.
  const stopping = new testing.TestContext("imports", { rows: 5 });
  stopping.cancel("stopping");
  const s = await stopping.run(importRows);
  assert.ok(!s.ok && s.retryable && s.retryAfterMs === 0);

  // Called directly, the handler throws what it throws under the worker.
  await assert.rejects(importRows({ rows: -1 }, new testing.TestContext("imports")), PermanentError);

  // A raw handler, and middleware around it.
  const seen: string[] = [];
  const mw: Middleware = async (ctx, next) => {
    seen.push(ctx.taskId);
    return next();
  };
  const raw = new testing.TestContext("raw", "hi", { taskId: "t-1" });
  const r = await raw.runRaw(async (ctx) => text.decode(ctx.payload).toUpperCase(), { middleware: [mw] });
  assert.ok(r.ok && text.decode(r.result) === "HI");
  assert.deepEqual(seen, ["t-1"]);
});

test("a producer and a worker run on a FakeClient", async () => {
  // wait's timeout timer does not hold the process open (a worker's wait must
  // not keep a finished program alive): this keeps the test's loop running.
  const alive = setInterval(() => {}, 1000);
  after(() => clearInterval(alive));
  const fake = new testing.FakeClient({ handlers: { imports: importRows } });

  // Attempt 1 checkpoints both rows and fails; attempt 2 resumes from its checkpoint.
  const { taskId } = await fake.submit<Import>("imports", { rows: 2 }, { metadata: { flaky: "1" } });
  const task = await wait(fake, taskId, { timeoutMs: 1000 });
  assert.equal(task.state, TaskState.SUCCEEDED);
  assert.equal(task.attempt, 2);
  assert.deepEqual(await fake.getResult(taskId), { rows: 2, resumedFrom: 2 });
  assert.deepEqual(fake.outcomes(taskId).map((o) => o.ok), [false, true]);

  // A permanent error: one attempt, DEAD; wait rejects with TaskFailedError.
  const dead = await fake.submit<Import>("imports", { rows: -1 });
  await assert.rejects(wait(fake, dead.taskId, { timeoutMs: 1000 }), (e: unknown) => e instanceof TaskFailedError && e.lastError === "negative row count");
  assert.equal(fake.task(dead.taskId)?.attempt, 1);

  // Retryable failures until maxAttempts.
  fake.handle("down", () => {
    throw new Error("unreachable");
  });
  await assert.rejects(submitAndWait(fake, { queue: "down", retry: { maxAttempts: 4 } }, { timeoutMs: 1000 }), TaskFailedError);
  const down = fake.tasks.find((t) => t.queue === "down")!;
  assert.deepEqual([down.state, down.attempt, down.lastError], [TaskState.DEAD, 4, "unreachable"]);

  // Keys deduplicate; a queue with no handler waits until one is registered.
  const a = await fake.submit("imports", { rows: 0 }, { key: "k" });
  const b = await fake.submit("imports", { rows: 0 }, { key: "k" });
  assert.ok(b.deduplicated && a.taskId === b.taskId);
  const later = await fake.submit("later", "x");
  await assert.rejects(wait(fake, later.taskId, { timeoutMs: 50 }), WaitTimeoutError);
  fake.handle("later", (data: string) => data.toUpperCase());
  assert.equal(await fake.runPending(), 1);
  const [done] = await waitAll(fake, [later.taskId], { timeoutMs: 1000 });
  assert.equal(await fake.getResult(done!.id), "X");
});

test("a TestContext records the cooldown a failing handler asks for", async () => {
  const callPartner = async (_: unknown, ctx: TaskContext): Promise<string> => {
    const scope = ctx.task.metadata["scope"];
    if (scope === "bucket") throw new RetryableError("429 from the partner", { coolDownBucketMs: 30_000 });
    throw new RetryableError("429 Too Many Requests", { coolDownKeyMs: 90_000, retryAfterMs: 1_000 });
  };
  const key = await new testing.TestContext("calls", {}, { key: "acme" }).run(callPartner);
  assert.ok(!key.ok);
  assert.deepEqual(key.cooldown, { scope: "CONCURRENCY_KEY", durationMs: 90_000 });
  assert.equal(key.retryAfterMs, 1_000);
  const bucket = await new testing.TestContext("calls", {}, { metadata: { scope: "bucket" } }).run(callPartner);
  assert.ok(!bucket.ok);
  assert.deepEqual(bucket.cooldown, { scope: "BUCKET", durationMs: 30_000 });

  // Without one, or from an error that is not a RetryableError, there is none.
  const plain = await new testing.TestContext("calls").run(() => {
    throw new RetryableError("busy");
  });
  assert.ok(!plain.ok && plain.cooldown === undefined);
  const permanent = await new testing.TestContext("calls").run(() => {
    throw new PermanentError("bad input");
  });
  assert.ok(!permanent.ok && permanent.cooldown === undefined);

  assert.throws(() => new RetryableError("x", { coolDownKeyMs: 1_000, coolDownBucketMs: 1_000 }), /not both/);
  assert.throws(() => new RetryableError("x", { coolDownKeyMs: 0 }), /above 0 ms/);
});
