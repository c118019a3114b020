// The peer workload for the Node job queues, shaped like taskbroker-bench's, on a
// Postgres database given by URL. Prints one JSON line of the taskbroker-bench shape.
//
//   node bench.mjs --system graphile-worker|pg-boss --config defaults|best \
//        --url postgres://... [--tasks 20000] [--workers 32] [--producers P] \
//        [--batch B] [--shape overlap|phased] \
//        [--latency closed,500,1000,3000] [--latency-seconds 3]
//
// Throughput, --shape overlap (the default, what taskbroker-bench does): the
// workers start first and get 300 ms to settle, then the clock starts and P
// producers (one call in flight each) enqueue their share of the N jobs, in calls
// of B jobs, while the workers drain; the clock stops when every job is settled
// in the database (counted by SQL once every handler ran). Defaults like
// taskbroker-bench: best = 2 producers x batches of 500 through the bulk API;
// defaults = one producer per worker, one job per call.
// --shape phased (the first comparison's shape): enqueue all N (bulk calls of
// 1000 from one producer, or per-job calls from P producers), then start the
// workers and drain; lifecycles/s = N / (enqueue time + drain time).
//
// Pick-up latency (--latency, after the throughput phase, workers kept running):
// from the enqueue call being sent to the handler starting, in this process.
// "closed": one job at a time for --latency-seconds (enqueue, wait until its
// handler starts, next). A number: that many jobs/s offered for --latency-seconds
// (open loop: every millisecond what is due is sent in one call, without waiting
// for earlier calls); p50/p99/max and the achieved rate (jobs handled / first
// send -> last handler start).
//
// graphile-worker 0.18: "defaults" = default options, one addJob per job;
//   "best" = the perf preset of its performance docs (localQueue 500, batched
//   completion, pool of workers + 1) and bulk addJobs (a pool of 32 to enqueue).
// pg-boss 12.35: "defaults" = one send() per job, work() with default fetch
//   (batchSize 1, 2 s polling); "best" = insert() batches, work() with
//   batchSize 100, burstWhenBatchFull, 0.5 s polling (its minimum), LISTEN/NOTIFY
//   wake-ups (useListenNotify + a notify queue) and a bigger pool.
import pg from "pg";

const PHASED_BULK = 1000;
const SETTLE_MS = 300;
const DRAIN_TIMEOUT_MS = 600_000;
const TICK_MS = 1;
/** Concurrent one-job enqueue calls made before the latency loops (the pools' size). */
const WARM_CALLS = 32;

function parseArgs(argv) {
  const a = { tasks: 20000, workers: 32, producers: 0, batch: 0, shape: "overlap", latency: "", "latency-seconds": 3 };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, "");
    a[key] = argv[i + 1];
  }
  for (const k of ["tasks", "workers", "producers", "batch", "latency-seconds"]) a[k] = Number(a[k]);
  const best = a.config === "best";
  if (!a.producers) a.producers = best && a.shape === "overlap" ? 2 : a.workers;
  if (!a.batch) a.batch = best ? 500 : 1;
  a.latencyLoops = String(a.latency)
    .split(",")
    .filter((s) => s !== "")
    .map((s) => (s === "closed" ? "closed" : Number(s)));
  const badLoop = a.latencyLoops.some((l) => l !== "closed" && !(l > 0));
  if (!a.url || !a.system || !a.config || !["overlap", "phased"].includes(a.shape) || badLoop || !(a.tasks > 0)) {
    console.error(
      "usage: node bench.mjs --system graphile-worker|pg-boss --config defaults|best --url URL [--tasks N] [--workers W] " +
        "[--producers P] [--batch B] [--shape overlap|phased] [--latency closed,RATE,...] [--latency-seconds S]",
    );
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

/** Resolves once `done.count` reached `target`, then once `countLeft()` (SQL) says
 * no job is left unsettled (completion may be batched after the handler returns). */
async function waitSettled(done, target, countLeft, deadline) {
  while (done.count < target) {
    if (Date.now() > deadline) throw new Error(`drain timed out: ${done.count} of ${target} handled`);
    await sleep(2);
  }
  for (;;) {
    if ((await countLeft()) === 0) return;
    if (Date.now() > deadline) throw new Error("drain timed out");
    await sleep(5);
  }
}

/** Each system behind one interface: enqueue one job or a batch (`datas`), start
 * the workers with a handler `onJob(data)`, count unsettled jobs, close. */
async function graphile(a) {
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
  // The open loop has many enqueue calls in flight: the default pool of 10 would queue them.
  const utils = await makeWorkerUtils({ connectionString: a.url, logger, ...(best ? { maxPoolSize: 32 } : {}) });
  const pool = new pg.Pool({ connectionString: a.url, max: 1 });
  let runner = null;
  return {
    config: best ? "perf preset + bulk addJobs" : "defaults + per-job addJob",
    enqueueOne: (data) => utils.addJob("noop", data),
    enqueueMany: (datas) => utils.addJobs(datas.map((payload) => ({ identifier: "noop", payload }))),
    async start(onJob) {
      runner = await run({ preset, logger, noHandleSignals: true, taskList: { noop: async (p) => onJob(p) } });
    },
    countLeft: async () => Number((await pool.query("select count(*) from graphile_worker._private_jobs")).rows[0].count),
    async close() {
      await runner?.stop();
      await utils.release();
      await pool.end();
    },
  };
}

async function pgboss(a) {
  const { PgBoss } = await import("pg-boss");
  const best = a.config === "best";
  const boss = new PgBoss(best ? { connectionString: a.url, max: a.workers + 4, useListenNotify: true } : a.url);
  boss.on("error", (e) => console.error("pg-boss:", e.message));
  await boss.start();
  const queue = "noop";
  await boss.createQueue(queue, best ? { notify: true } : {});
  const pool = new pg.Pool({ connectionString: a.url, max: 1 });
  return {
    config: best ? "insert() batches + batch fetch + notify" : "defaults + per-job send()",
    enqueueOne: (data) => boss.send(queue, data),
    enqueueMany: (datas) => boss.insert(queue, datas.map((data) => ({ data }))),
    async start(onJob) {
      const options = best
        ? { localConcurrency: a.workers, batchSize: 100, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5 }
        : { localConcurrency: a.workers };
      await boss.work(queue, options, async (jobs) => {
        for (const job of jobs) onJob(job.data);
      });
    },
    countLeft: async () =>
      Number(
        (await pool.query("select count(*) from pgboss.job where name = $1 and state < 'completed'", [queue])).rows[0]
          .count,
      ),
    async close() {
      await boss.stop({ graceful: false, wait: false });
      await pool.end();
    },
  };
}

/** Enqueues `datas` in one call: the bulk API in best, per-job calls otherwise. */
function enqueue(sys, a, datas) {
  if (a.config === "best") return sys.enqueueMany(datas);
  return Promise.all(datas.map((d) => sys.enqueueOne(d)));
}

async function throughputOverlap(sys, a, done, onJob) {
  await sys.start(onJob);
  await sleep(SETTLE_MS);
  const t0 = performance.now();
  let submitEnd = t0;
  const producers = Array.from({ length: a.producers }, async (_, i) => {
    const [from, to] = [Math.floor((a.tasks * i) / a.producers), Math.floor((a.tasks * (i + 1)) / a.producers)];
    for (let next = from; next < to; next += a.batch) {
      const n = Math.min(a.batch, to - next);
      await enqueue(sys, a, Array.from({ length: n }, () => ({})));
    }
    submitEnd = Math.max(submitEnd, performance.now());
  });
  await Promise.all(producers);
  await waitSettled(done, a.tasks, sys.countLeft, Date.now() + DRAIN_TIMEOUT_MS);
  const t1 = performance.now();
  return { elapsedMs: t1 - t0, submitMs: submitEnd - t0, drainMs: null };
}

async function throughputPhased(sys, a, done, onJob) {
  const t0 = performance.now();
  if (a.config === "best") {
    for (let i = 0; i < a.tasks; i += PHASED_BULK) {
      const n = Math.min(PHASED_BULK, a.tasks - i);
      await sys.enqueueMany(Array.from({ length: n }, () => ({})));
    }
  } else {
    await inParallel(a.tasks, a.producers, () => sys.enqueueOne({}));
  }
  const t1 = performance.now();
  await sys.start(onJob);
  await waitSettled(done, a.tasks, sys.countLeft, Date.now() + DRAIN_TIMEOUT_MS);
  const t2 = performance.now();
  return { elapsedMs: t2 - t0, submitMs: t1 - t0, drainMs: t2 - t1 };
}

/** Nearest-rank percentile of sorted numbers. */
function percentile(sorted, q) {
  if (sorted.length === 0) return null;
  const rank = Math.min(Math.max(Math.ceil(q * sorted.length), 1), sorted.length);
  return sorted[rank - 1];
}

/** One latency loop ("closed" or an offered rate) on the running workers. Jobs
 * carry {s: seq}; `latency.started[seq]` is set by the handler. */
async function latencyLoop(sys, a, latency, loop) {
  const seconds = a["latency-seconds"];
  const [sentAt, ackedAt] = [[], []];
  latency.started = [];
  const deadline = Date.now() + seconds * 1000 + DRAIN_TIMEOUT_MS;
  const origin = performance.now();
  if (loop === "closed") {
    while (performance.now() - origin < seconds * 1000) {
      const seq = sentAt.length;
      const started = new Promise((r) => (latency.waiter = { seq, resolve: r }));
      sentAt.push(performance.now());
      await enqueue(sys, a, [{ s: seq }]);
      ackedAt[seq] = performance.now();
      await started;
      if (Date.now() > deadline) throw new Error("closed loop timed out");
    }
  } else {
    const total = Math.max(1, Math.round(loop * seconds));
    const calls = [];
    while (sentAt.length < total) {
      await sleep(TICK_MS);
      const due = Math.min(total, Math.floor(((performance.now() - origin) / 1000) * loop));
      // Per-job configurations send one call per job, as a fleet of naive producers would.
      const datas = [];
      while (sentAt.length < due) {
        datas.push({ s: sentAt.length });
        sentAt.push(performance.now());
      }
      for (let i = 0; i < datas.length; i += a.batch) {
        const part = datas.slice(i, i + a.batch);
        calls.push(enqueue(sys, a, part).then(() => part.forEach((d) => (ackedAt[d.s] = performance.now()))));
      }
    }
    await Promise.all(calls);
    while (latency.started.filter((t) => t !== undefined).length < total) {
      if (Date.now() > deadline) throw new Error(`open loop at ${loop}/s timed out`);
      await sleep(2);
    }
  }
  // How late each send was against its schedule: a late sender means the load generator,
  // not the system, set the pace (the open loop's offered rate was not offered).
  const lag = loop === "closed" ? [] : sentAt.map((t, i) => Math.max(0, t - origin - (i / loop) * 1000));
  lag.sort((x, y) => x - y);
  const samples = sentAt.map((t, i) => latency.started[i] - t).filter((v) => v >= 0);
  samples.sort((x, y) => x - y);
  // From the enqueue call's acknowledgement (taskbroker-bench's "from ack"); negative when the
  // handler started before the call returned, counted as 0.
  const fromAck = sentAt.map((_, i) => Math.max(0, latency.started[i] - ackedAt[i])).filter((v) => v >= 0);
  fromAck.sort((x, y) => x - y);
  const lastStart = Math.max(...latency.started.filter((t) => t !== undefined));
  const ms = (v) => (v === null ? null : Math.round(v * 1000) / 1000);
  return {
    loop: loop === "closed" ? "closed" : "open",
    offered_rate: loop === "closed" ? null : loop,
    achieved_rate: Math.round((samples.length / ((lastStart - sentAt[0]) / 1000)) * 10) / 10,
    samples: samples.length,
    p50_ms: ms(percentile(samples, 0.5)),
    p99_ms: ms(percentile(samples, 0.99)),
    max_ms: ms(percentile(samples, 1.0)),
    from_ack_p50_ms: ms(percentile(fromAck, 0.5)),
    from_ack_p99_ms: ms(percentile(fromAck, 0.99)),
    send_lag_p99_ms: ms(percentile(lag, 0.99)),
  };
}

const a = parseArgs(process.argv.slice(2));
const sys = a.system === "graphile-worker" ? await graphile(a) : await pgboss(a);
const done = { count: 0 };
// Throughput jobs carry {}, latency jobs {s: seq}: the one handler tells them apart.
const latency = { started: [], waiter: null };
const onJob = (data) => {
  if (data && data.s !== undefined) {
    latency.started[data.s] = performance.now();
    if (latency.waiter?.seq === data.s) latency.waiter.resolve();
  } else {
    done.count++;
  }
};
const r = a.shape === "overlap" ? await throughputOverlap(sys, a, done, onJob) : await throughputPhased(sys, a, done, onJob);
const loops = [];
if (a.latencyLoops.length > 0) {
  // Opens the enqueue pool's connections before measuring, as taskbroker-bench connects
  // before it measures: otherwise the first loop that sends calls in parallel pays for them.
  const before = done.count;
  await Promise.all(Array.from({ length: WARM_CALLS }, () => enqueue(sys, a, [{}])));
  await waitSettled(done, before + WARM_CALLS, sys.countLeft, Date.now() + DRAIN_TIMEOUT_MS);
}
for (const loop of a.latencyLoops) loops.push(await latencyLoop(sys, a, latency, loop));
await sys.close();

const round = (v) => (v === null ? null : Math.round(v * 10) / 10);
const best = a.config === "best";
const firstOpen = loops.find((l) => l.loop === "open");
const line = {
  system: a.system,
  label: a.label ?? null,
  store: "postgres",
  mode: best ? "batched" : "per-task",
  config: sys.config,
  shape: a.shape,
  tasks: a.tasks,
  producers: a.shape === "phased" && best ? 1 : a.producers,
  workers: a.workers,
  submit_batch: a.shape === "phased" && best ? PHASED_BULK : a.batch,
  lifecycles_per_sec: round((a.tasks * 1000) / r.elapsedMs),
  submit_per_sec: round((a.tasks * 1000) / r.submitMs),
  drain_per_sec: r.drainMs === null ? null : round((a.tasks * 1000) / r.drainMs),
  elapsed_sec: Math.round(r.elapsedMs) / 1000,
  handled: done.count,
  dispatch_rate: firstOpen?.offered_rate ?? null,
  dispatch_p50_ms: null,
  dispatch_p99_ms: null,
  dispatch_max_ms: null,
  dispatch_from_send_p50_ms: firstOpen?.p50_ms ?? null,
  dispatch_from_send_p99_ms: firstOpen?.p99_ms ?? null,
  latency: loops,
  broker_rss_mb: null,
};
console.log(
  `${a.system} (${line.config}): ${line.lifecycles_per_sec}/s lifecycles, enqueue ${line.submit_per_sec}/s, ${a.workers} workers`,
);
for (const l of loops) {
  console.log(
    `  pick-up ${l.loop}${l.offered_rate ? ` at ${l.offered_rate}/s` : ""}: p50 ${l.p50_ms} / p99 ${l.p99_ms} / max ${l.max_ms} ms, ${l.samples} jobs, ${l.achieved_rate}/s`,
  );
}
console.log(JSON.stringify(line));
process.exit(0);
