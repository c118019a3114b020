/**
 * Limit buckets and cooldowns against the live broker at $TASKBROKER_ADDR
 * (scripts/conformance.sh typescript starts one; skipped without it): a handler's
 * RetryableError with coolDownKeyMs holds its key until the cooldown is lifted, and a
 * bucket's settings go round trip through updateBucket, getBucket, listBuckets and deleteBucket.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import { Code, ConnectError, RetryableError, connect, optionsFromEnv, wait, Worker, type TaskContext } from "../src/index.js";
import { updateBucketRequest } from "../src/buckets.js";

const addr = process.env["TASKBROKER_ADDR"];
const skip = addr ? false : "TASKBROKER_ADDR is not set; needs a live broker";
const suffix = () => randomBytes(4).toString("hex");

test("updateBucketRequest names each field given in the mask, and refuses an empty update", () => {
  const req = updateBucketRequest("b", { maxConcurrent: 4, rateLimit: { perSecond: 20 } });
  assert.deepEqual(req.updateMask.paths, ["rate_limit", "max_concurrent"]);
  assert.deepEqual(req.config, { rateLimit: { perSecond: 20, burst: 0 }, maxConcurrent: 4 });
  assert.deepEqual(updateBucketRequest("b", { rateLimit: null }), { name: "b", config: {}, updateMask: { paths: ["rate_limit"] } });
  assert.throws(() => updateBucketRequest("b", {}), /nothing to change/);
});

test("a handler's key cooldown holds the key's other task until it is lifted", { skip }, async () => {
  await using client = connect(addr!, optionsFromEnv({ defaultTimeoutMs: 10_000 }));
  const queue = `test.typescript.cooldown.${suffix()}`;
  const a = await client.submit(queue, "a", { concurrencyKey: "acme" });
  const b = await client.submit(queue, "b", { concurrencyKey: "acme" });

  // One task at a time: the second is leased only after the first's Fail (and its cooldown) is stored.
  let first: string | undefined;
  const worker = new Worker(client, { concurrency: 1, pollWaitMs: 1_000 }).handle<string, string>(queue, async (data, ctx: TaskContext) => {
    if (first === undefined) {
      first = ctx.taskId;
      throw new RetryableError("429 Too Many Requests", { coolDownKeyMs: 3_600_000 });
    }
    return `ran ${data}`;
  });
  const failed = new Promise<string>((resolve) => worker.on("failed", (ctx) => resolve(ctx.taskId)));
  const running = worker.run({ handleSignals: false });
  try {
    const cooled = await failed;
    const other = cooled === a.taskId ? b.taskId : a.taskId;
    const cooldowns = await client.listCooldowns({ queue });
    assert.equal(cooldowns.length, 1, cooldowns.map((h) => `${h.scope} ${h.queue} ${h.concurrencyKey} ${h.bucket}`).join("; "));
    const [c] = cooldowns;
    assert.deepEqual([c!.scope, c!.queue, c!.concurrencyKey, c!.bucket, c!.taskId], ["CONCURRENCY_KEY", queue, "acme", "", cooled]);
    assert.ok(c!.until instanceof Date && c!.until.getTime() > Date.now() + 50 * 60_000, `until ${c!.until}`);
    // The failed task's own retry waits at least as long as the cooldown.
    const retry = await client.getTask(cooled);
    assert.ok(retry.runAt !== undefined && retry.runAt.getTime() >= c!.until!.getTime() - 1_000, `runAt ${retry.runAt}`);

    const held = await client.explainTask(other);
    assert.equal(held.state, "READY");
    assert.deepEqual(held.gates.map((g) => [g.kind, g.concurrencyKey]), [["COOLDOWN", "acme"]]);

    assert.equal(await client.liftCooldown({ queue, key: "acme" }), true);
    assert.deepEqual(await client.listCooldowns({ queue }), []);
    assert.equal(await client.liftCooldown({ queue, key: "acme" }), false, "nothing left to lift");
    await wait(client.admin, other, { timeoutMs: 30_000 });
    assert.equal(await client.getResult<string>(other), `ran ${other === a.taskId ? "a" : "b"}`);
  } finally {
    await worker.close();
    await running;
  }
  await client.cancelTask(first!);
});

test("a bucket goes round trip, and a task names it at submit", { skip }, async () => {
  await using client = connect(addr!, optionsFromEnv({ defaultTimeoutMs: 10_000 }));
  const name = `test.typescript.bucket.${suffix()}`;
  const made = await client.updateBucket(name, { rateLimit: { perSecond: 20, burst: 20 }, maxConcurrent: 50 });
  assert.deepEqual([made.name, made.rateLimit, made.maxConcurrent, made.leasesHeld], [name, { perSecond: 20, burst: 20 }, 50, 0]);
  assert.ok(made.updatedAt instanceof Date);
  assert.equal(made.cooldownUntil, undefined);

  const got = await client.getBucket(name);
  assert.deepEqual([got.rateLimit, got.maxConcurrent], [{ perSecond: 20, burst: 20 }, 50]);
  assert.ok((await client.listBuckets()).some((b) => b.name === name && b.maxConcurrent === 50));

  // Only the fields given change.
  const changed = await client.updateBucket(name, { rateLimit: null });
  assert.deepEqual([changed.rateLimit, changed.maxConcurrent], [undefined, 50]);

  const queue = `test.typescript.bucket.${suffix()}`;
  const { taskId } = await client.submit(queue, {}, { bucket: name, delayMs: 3_600_000 });
  assert.equal((await client.getTask(taskId)).bucket, name);
  await client.cancelTask(taskId);

  await client.deleteBucket(name);
  assert.ok(!(await client.listBuckets()).some((b) => b.name === name));
  const notFound = (err: unknown) => err instanceof ConnectError && err.code === Code.NotFound;
  await assert.rejects(client.getBucket(name), notFound);
  await assert.rejects(client.deleteBucket(name), notFound);
  await assert.rejects(client.updateBucket("not a bucket name!", { maxConcurrent: 1 }), (err: unknown) => err instanceof ConnectError && err.code === Code.InvalidArgument);
});

test("a handler's bucket cooldown shows on its bucket until it is lifted", { skip }, async () => {
  await using client = connect(addr!, optionsFromEnv({ defaultTimeoutMs: 10_000 }));
  const queue = `test.typescript.cooldown.${suffix()}`;
  const bucket = `test.typescript.bucket.${suffix()}`;
  await client.updateBucket(bucket, { maxConcurrent: 10 });
  const { taskId } = await client.submit(queue, "x", { bucket });
  const worker = new Worker(client, { concurrency: 1, pollWaitMs: 1_000 }).handle<string, string>(queue, async () => {
    throw new RetryableError("429 from the partner", { coolDownBucketMs: 3_600_000 });
  });
  const failed = new Promise<void>((resolve) => worker.on("failed", () => resolve()));
  const running = worker.run({ handleSignals: false });
  try {
    await failed;
  } finally {
    await worker.close();
    await running;
  }
  const cooldowns = await client.listCooldowns({ bucket });
  assert.deepEqual(cooldowns.map((c) => [c.scope, c.bucket, c.queue, c.taskId]), [["BUCKET", bucket, "", taskId]]);
  assert.deepEqual((await client.getBucket(bucket)).cooldownUntil, cooldowns[0]!.until);
  assert.equal(await client.liftCooldown({ bucket }), true);
  assert.equal((await client.getBucket(bucket)).cooldownUntil, undefined);
  await client.cancelTask(taskId);
  await client.deleteBucket(bucket);
});
