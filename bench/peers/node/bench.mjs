// The peer workload for the Node job queues, the same as taskbroker-bench's:
// enqueue N no-op jobs, then drain them with W concurrent workers, on a Postgres
// database given by URL. Prints one JSON line of the taskbroker-bench shape.
//
//   node bench.mjs --system graphile-worker|pg-boss --config defaults|best \
//        --url postgres://... [--tasks 20000] [--workers 32] [--producers W]
//
// graphile-worker 0.18: "defaults" = default options, one addJob per job;
//   "best" = the perf preset of its performance docs (localQueue 500, batched
//   completion, pool of workers + 1) and one bulk addJobs per 1000 jobs.
// pg-boss 12.35: "defaults" = one send() per job, work() with default fetch
//   (batchSize 1, 2 s polling); "best" = insert() per 1000 jobs, work() with
//   batchSize 100, burstWhenBatchFull, 0.5 s polling and a bigger pool.
// Per-job enqueue runs `--producers` (default: one per worker) calls at once.
// lifecycles/s = N / (enqueue time + drain time); the drain ends when every job
// is settled in the database (counted by SQL), not when the last handler returns.
import pg from "pg";

const BULK = 1000;
const DRAIN_TIMEOUT_MS = 600_000;

function parseArgs(argv) {
  const a = { tasks: 20000, workers: 32, producers: 0 };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, "");
    a[key] = argv[i + 1];
  }
  for (const k of ["tasks", "workers", "producers"]) a[k] = Number(a[k]);
  if (!a.producers) a.producers = a.workers;
  if (!a.url || !a.system || !a.config) {
    console.error("usage: node bench.mjs --system graphile-worker|pg-boss --config defaults|best --url URL [--tasks N] [--workers W] [--producers P]");
    process.exit(2);
  }
  return a;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Runs `fn(i)` for i in [0, n) with at most `width` calls in flight. */
async function inParallel(n, width, fn) {
  let next = 0;
  const lanes = Array.from({ length: Math.min(width, n) }, async () => {
    while (next < n) await fn(next++);
  });
  await Promise.all(lanes);
}

/** Resolves once every handler ran, then once `countLeft()` (SQL) says no job is
 * left unsettled (completion may be batched after the handler returns). */
async function waitSettled(done, tasks, countLeft, deadline) {
  while (done.count < tasks) {
    if (Date.now() > deadline) throw new Error(`drain timed out: ${done.count} of ${tasks} handled`);
    await sleep(2);
  }
  for (;;) {
    if ((await countLeft()) === 0) return;
    if (Date.now() > deadline) throw new Error("drain timed out");
    await sleep(5);
  }
}

async function graphile(a, done) {
  const { run, makeWorkerUtils, runMigrations } = await import("graphile-worker");
  const best = a.config === "best";
  const preset = {
    worker: best
      ? {
          connectionString: a.url,
          concurrentJobs: a.workers,
          maxPoolSize: a.workers + 1,
          localQueue: { size: 500 },
          completeJobBatchDelay: 0,
          failJobBatchDelay: 0,
        }
      : { connectionString: a.url, concurrentJobs: a.workers },
  };
  const logger = new (await import("@graphile/logger")).Logger(() => () => {});
  await runMigrations({ connectionString: a.url, logger });
  const utils = await makeWorkerUtils({ connectionString: a.url, logger });
  const t0 = performance.now();
  if (best) {
    for (let i = 0; i < a.tasks; i += BULK) {
      const n = Math.min(BULK, a.tasks - i);
      await utils.addJobs(Array.from({ length: n }, () => ({ identifier: "noop", payload: {} })));
    }
  } else {
    await inParallel(a.tasks, a.producers, () => utils.addJob("noop", {}));
  }
  const t1 = performance.now();
  const pool = new pg.Pool({ connectionString: a.url, max: 1 });
  const left = async () =>
    Number((await pool.query("select count(*) from graphile_worker._private_jobs")).rows[0].count);
  const runner = await run({
    preset,
    logger,
    noHandleSignals: true,
    taskList: { noop: async () => done.count++ },
  });
  await waitSettled(done, a.tasks, left, Date.now() + DRAIN_TIMEOUT_MS);
  const t2 = performance.now();
  await runner.stop();
  await utils.release();
  await pool.end();
  return { enqueueMs: t1 - t0, drainMs: t2 - t1, config: best ? "perf preset + bulk addJobs" : "defaults + per-job addJob" };
}

async function pgboss(a, done) {
  const { PgBoss } = await import("pg-boss");
  const best = a.config === "best";
  const boss = new PgBoss(best ? { connectionString: a.url, max: a.workers + 4 } : a.url);
  boss.on("error", (e) => console.error("pg-boss:", e.message));
  await boss.start();
  const queue = "noop";
  await boss.createQueue(queue);
  const t0 = performance.now();
  if (best) {
    for (let i = 0; i < a.tasks; i += BULK) {
      const n = Math.min(BULK, a.tasks - i);
      await boss.insert(queue, Array.from({ length: n }, () => ({ data: {} })));
    }
  } else {
    await inParallel(a.tasks, a.producers, () => boss.send(queue, {}));
  }
  const t1 = performance.now();
  const pool = new pg.Pool({ connectionString: a.url, max: 1 });
  const left = async () =>
    Number(
      (await pool.query("select count(*) from pgboss.job where name = $1 and state < 'completed'", [queue]))
        .rows[0].count,
    );
  const options = best
    ? { localConcurrency: a.workers, batchSize: 100, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5 }
    : { localConcurrency: a.workers };
  await boss.work(queue, options, async (jobs) => {
    done.count += jobs.length;
  });
  await waitSettled(done, a.tasks, left, Date.now() + DRAIN_TIMEOUT_MS);
  const t2 = performance.now();
  await boss.stop({ graceful: false, wait: false });
  await pool.end();
  return { enqueueMs: t1 - t0, drainMs: t2 - t1, config: best ? "insert() batches + batch fetch" : "defaults + per-job send()" };
}

const a = parseArgs(process.argv.slice(2));
const done = { count: 0 };
const r = a.system === "graphile-worker" ? await graphile(a, done) : await pgboss(a, done);
const round = (v) => Math.round(v * 10) / 10;
const line = {
  system: a.system,
  label: a.label ?? null,
  store: "postgres",
  mode: a.config === "best" ? "batched" : "per-task",
  config: r.config,
  tasks: a.tasks,
  producers: a.config === "best" ? 1 : a.producers,
  workers: a.workers,
  lifecycles_per_sec: round((a.tasks * 1000) / (r.enqueueMs + r.drainMs)),
  submit_per_sec: round((a.tasks * 1000) / r.enqueueMs),
  drain_per_sec: round((a.tasks * 1000) / r.drainMs),
  elapsed_sec: Math.round(r.enqueueMs + r.drainMs) / 1000,
  handled: done.count,
  dispatch_p50_ms: null,
  dispatch_p99_ms: null,
  dispatch_max_ms: null,
  broker_rss_mb: null,
};
console.log(
  `${a.system} (${r.config}): ${line.lifecycles_per_sec}/s lifecycles, enqueue ${line.submit_per_sec}/s, drain ${line.drain_per_sec}/s, ${a.workers} workers`,
);
console.log(JSON.stringify(line));
process.exit(0);
