/**
 * Runs clients/conformance/FAULTS.md against the broker at $TASKBROKER_ADDR, which
 * scripts/conformance.sh typescript --faults kills, restarts and pauses on request (the control
 * FIFOs $TASKBROKER_FAULT_CTL and $TASKBROKER_FAULT_ACK). Prints one PASS/FAIL line per case,
 * then "N passed, M failed"; exits 0 only when M is 0.
 */
import { randomBytes } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { connect, optionsFromEnv, TaskState, Worker, WorkerStoppedError, type Logger, type Taskbroker, type TaskContext } from "../src/index.js";
import { DEFAULTS } from "../src/spec.js";
import { Metrics } from "./metric_reader.js";

const WORKER_ID = "conf-typescript";
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

class CaseFailed extends Error {}
function check(cond: boolean, reason: string): asserts cond {
  if (!cond) throw new CaseFailed(reason);
}

/** Asks scripts/conformance.sh to do `command` to the broker; returns once it is done. */
function fault(command: string): void {
  writeFileSync(process.env["TASKBROKER_FAULT_CTL"]!, command + "\n");
  const reply = readFileSync(process.env["TASKBROKER_FAULT_ACK"]!, "utf8").trim();
  check(reply === "ok", `fault ${command}: ${reply}`);
}

class Lines implements Logger {
  readonly warns: string[] = [];
  warn(m: string) {
    this.warns.push(m);
    console.warn(m);
  }
  error(m: string) {
    console.error(m);
  }
}

function latch(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((r) => (open = r));
  return { promise, open };
}

async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new CaseFailed(`${what} within ${ms / 1000} s`)), ms)));
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

async function submit(tb: Taskbroker, queue: string, n: number, retry?: { maxAttempts: number; initialBackoff?: { seconds: bigint } }) {
  const res = await tb.broker.submit({ tasks: Array.from({ length: n }, () => ({ queue, payload: new TextEncoder().encode("x"), retry })) });
  return res.results.map((r) => r.taskId);
}

async function getTask(tb: Taskbroker, id: string) {
  const res = await tb.admin.getTask({ taskId: id });
  return res.task!;
}

const FINAL = new Set([TaskState.SUCCEEDED, TaskState.DEAD, TaskState.CANCELLED]);
async function waitFinished(tb: Taskbroker, id: string, ms: number) {
  const end = Date.now() + ms;
  for (;;) {
    try {
      const t = await getTask(tb, id);
      if (FINAL.has(t.state)) return t;
      if (Date.now() > end) throw new CaseFailed(`task ${id} is ${TaskState[t.state]} after ${ms / 1000} s`);
    } catch (err) {
      if (err instanceof CaseFailed || Date.now() > end) throw err;
    }
    await sleep(100);
  }
}

function worker(tb: Taskbroker, queue: string, handler: (ctx: TaskContext) => Promise<unknown>, opts: Partial<ConstructorParameters<typeof Worker>[2]> = {}) {
  return new Worker(tb.broker, handler as (ctx: TaskContext) => Promise<string>, {
    queues: [queue],
    workerId: WORKER_ID,
    pollWaitMs: 1_000,
    ...opts,
  });
}

const text = new TextDecoder();

const cases: [string, (tb: Taskbroker, queue: string) => Promise<void>][] = [
  [
    "restart_mid_settle",
    async (tb, queue) => {
      const ids = await submit(tb, queue, 3);
      let started = 0;
      const allStarted = latch();
      const release = latch();
      let runs = 0;
      const w = worker(
        tb,
        queue,
        async () => {
          runs++;
          if (++started === 3) allStarted.open();
          await release.promise;
          return "done";
        },
        { concurrency: 3, leaseDurationMs: 30_000 },
      );
      const run = w.run();
      try {
        await within(allStarted.promise, 20_000, "the handlers did not all start");
        fault("kill");
        release.open();
        await sleep(4_000); // the outage itself (FAULTS.md): longer than five quick retries take
        fault("start");
        for (const id of ids) {
          const t = await waitFinished(tb, id, 25_000);
          check(
            t.state === TaskState.SUCCEEDED && t.attempt === 1 && text.decode(t.result) === "done",
            `task ${id} is ${TaskState[t.state]} attempt ${t.attempt} result ${text.decode(t.result)} (last error ${t.lastError}), want SUCCEEDED attempt 1 "done"`,
          );
        }
        check(runs === 3, `the handler ran ${runs} times for 3 tasks`);
      } finally {
        release.open();
        await w.stop(5_000);
        await run.catch(() => {});
      }
    },
  ],
  [
    "paused_past_lease",
    async (tb, queue) => {
      const [id] = await submit(tb, queue, 1, { maxAttempts: 3, initialBackoff: { seconds: 0n } });
      const started = latch();
      const told = latch();
      let kind: string | undefined;
      let toldAt = 0;
      const lines = new Lines();
      const leaseMs = 2_000;
      const w = worker(
        tb,
        queue,
        async (ctx) => {
          if (ctx.attempt > 1) return "second";
          started.open();
          await new Promise<void>((resolve) => {
            const t = setTimeout(resolve, 20_000);
            ctx.signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
          });
          kind = ctx.abortKind;
          toldAt = Date.now();
          told.open();
          return "late";
        },
        { concurrency: 1, leaseDurationMs: leaseMs, logger: lines },
      );
      const run = w.run();
      try {
        await within(started.promise, 20_000, "the handler did not start");
        const pausedAt = Date.now();
        fault("pause");
        try {
          await within(told.promise, 20_000, "the handler was not told");
        } finally {
          fault("resume");
        }
        check(kind === "lost", `the handler's signal was aborted with ${kind}, want lost`);
        const after = toldAt - pausedAt;
        check(after <= leaseMs + 1_000, `the handler was told ${after} ms after the pause, want within the lease + 1 s`);
        const t = await waitFinished(tb, id!, 20_000);
        check(
          t.state === TaskState.SUCCEEDED && t.attempt === 2 && text.decode(t.result) === "second",
          `task is ${TaskState[t.state]} attempt ${t.attempt} result ${text.decode(t.result)}, want SUCCEEDED attempt 2 "second"`,
        );
        const named = lines.warns.filter((m) => m.includes(id!));
        check(named.length === 1, `${named.length} warn lines name the task, want 1: ${JSON.stringify(named)}`);
      } finally {
        await w.stop(5_000);
        await run.catch(() => {});
      }
    },
  ],
  [
    "stop_bound",
    async (tb, queue) => {
      const [id] = await submit(tb, queue, 1);
      const started = latch();
      const gate = latch();
      const stopTimeoutMs = 2_000;
      const w = worker(
        tb,
        queue,
        async () => {
          started.open();
          await gate.promise; // ignores its signal
          return "late";
        },
        { concurrency: 1, stopTimeoutMs },
      );
      const run = w.run();
      try {
        await within(started.promise, 20_000, "the handler did not start");
        const t0 = Date.now();
        await w.stop();
        const took = Date.now() - t0;
        const bound = stopTimeoutMs + DEFAULTS.stopMarginMs + 1_000;
        check(took <= bound, `stop took ${took} ms, want at most ${bound} ms`);
        const t = await getTask(tb, id!);
        check(
          t.state === TaskState.READY && t.attempt === 1,
          `after the stop the task is ${TaskState[t.state]} attempt ${t.attempt}, want READY attempt 1 (handed back)`,
        );
      } finally {
        gate.open();
        await run.catch(() => {});
      }
    },
  ],
  [
    "wrong_result_type",
    async (tb, queue) => {
      const [id] = await submit(tb, queue, 1, { maxAttempts: 1 });
      const w = worker(tb, queue, async () => ({ not: "bytes" }));
      const run = w.run();
      try {
        const t = await waitFinished(tb, id!, 10_000);
        check(t.state === TaskState.DEAD, `task is ${TaskState[t.state]}, want DEAD (failed at once, 1 attempt)`);
        check(t.lastError.includes("plain object"), `last_error ${JSON.stringify(t.lastError)} does not name the type`);
      } finally {
        await w.stop(5_000);
        await run.catch(() => {});
      }
    },
  ],
  [
    "settle_batching",
    async (tb, queue) => {
      const n = 10;
      const ids = await submit(tb, queue, n);
      const metrics = new Metrics();
      let started = 0;
      const allStarted = latch();
      const release = latch();
      const w = worker(
        tb,
        queue,
        async () => {
          if (++started === n) allStarted.open();
          await release.promise;
          return "done";
        },
        { concurrency: n, meterProvider: metrics.provider },
      );
      const run = w.run({ handleSignals: false });
      try {
        await within(allStarted.promise, 20_000, "the handlers did not all start");
        fault("pause");
        try {
          release.open();
          // The runtime's own count: the first Complete is in flight to the paused broker.
          await within(
            (async () => {
              while (w.pendingCompletions < n - 1) await sleep(10);
            })(),
            5_000,
            `${n - 1} completions did not queue behind the call in flight (${w.pendingCompletions} did)`,
          );
        } finally {
          fault("resume");
        }
        for (const id of ids) {
          const t = await waitFinished(tb, id, 20_000);
          check(
            t.state === TaskState.SUCCEEDED && t.attempt === 1,
            `task ${id} is ${TaskState[t.state]} attempt ${t.attempt} (last error ${t.lastError}), want SUCCEEDED attempt 1`,
          );
        }
      } finally {
        release.open();
        await w.stop(5_000);
        await run.catch(() => {});
      }
      const complete = await metrics.sum("taskbroker.worker.settle.calls", { rpc: "Complete" });
      const many = await metrics.sum("taskbroker.worker.settle.calls", { rpc: "CompleteMany" });
      check(complete === 1 && many === 1, `settle.calls: ${complete} Complete and ${many} CompleteMany, want 1 and 1`);
    },
  ],
  [
    "http_port",
    async (_tb, queue) => {
      const http = connect(process.env["TASKBROKER_HTTP_ADDR"]!, optionsFromEnv());
      const fast = worker(http, queue, async () => "x", { failFast: true });
      const err = await within(
        fast.run({ handleSignals: false }).then(
          () => new CaseFailed("run() with failFast resolved, want a rejection saying why"),
          (e: unknown) => e,
        ),
        20_000,
        "the failFast worker did not stop by itself",
      );
      check(err instanceof WorkerStoppedError, `the failFast worker stopped with ${String(err)}, want a WorkerStoppedError`);
      check(!err.message.includes("\n"), `its error is not one line: ${JSON.stringify(err.message)}`);
      const w = worker(http, queue, async () => "x");
      const run = w.run();
      let stopped = false;
      try {
        await within(
          run.then(
            () => {
              throw new CaseFailed("run() resolved, want a rejection saying why it stopped");
            },
            () => {
              stopped = true;
            },
          ),
          20_000,
          "the worker did not stop by itself",
        );
        check(stopped, "the worker did not stop");
      } finally {
        await w.stop(1_000);
      }
    },
  ],
];

async function main(): Promise<number> {
  const tb = connect(process.env["TASKBROKER_ADDR"]!, optionsFromEnv());
  let passed = 0;
  let failed = 0;
  for (const [name, run] of cases) {
    const queue = `conf.typescript.${name}.${randomBytes(3).toString("hex")}`;
    try {
      await run(tb, queue);
      console.log(`PASS ${name}`);
      passed++;
    } catch (err) {
      const reason = err instanceof Error ? err.message : String(err);
      console.log(`FAIL ${name}: ${reason.replace(/\s+/g, " ")}`);
      failed++;
    }
  }
  console.log(`${passed} passed, ${failed} failed`);
  return failed > 0 ? 1 : 0;
}

process.exit(await main());
