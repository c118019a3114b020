/**
 * The client conformance scenario (clients/conformance/SCENARIO.md) in TypeScript.
 *
 * Talks to the broker at $TASKBROKER_ADDR through the generated Connect clients only, prints
 * `PASS <case>` / `FAIL <case>: <reason>` per case and `N passed, M failed` last; exits 1
 * when any case failed.
 */
import { randomBytes } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { durationFromMs, timestampFromMs, timestampMs, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  connect,
  optionsFromEnv,
  type Client,
  errorInfo,
  TaskState,
  OverlapPolicy,
  ScheduleState,
  type AdminClient,
  type BrokerClient,
  type ScheduleClient,
  type LeasedTask,
  type TaskSpecSchema,
} from "../src/index.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { specCases } from "./spec_cases.js";
import { routingCases } from "./routing_cases.js";
import { flowCases } from "./flow_cases.js";
import { leaseNextCases } from "./lease_next_cases.js";
import { bindingCases } from "./binding_cases.js";
import { typedCases } from "./typed_cases.js";
import { resultsCases } from "./results_cases.js";

const LANG = "typescript";
const WORKER_ID = `conf-${LANG}`;
const utf8 = new TextEncoder();
const text = new TextDecoder();
const HOUR_MS = 3_600_000;

interface Env {
  /** The typed client the services below belong to. */
  client: Client;
  broker: BrokerClient;
  admin: AdminClient;
  schedules: ScheduleClient;
  /** A fresh queue for this case: conf.typescript.<case>.<random>. */
  queue: string;
}

type Case = (env: Env) => Promise<void>;

class Mismatch extends Error {}

function check(ok: boolean, reason: string): asserts ok {
  if (!ok) throw new Mismatch(reason);
}

function bytes(s: string): Uint8Array {
  return utf8.encode(s);
}

function ms(ts: Timestamp | undefined): number | undefined {
  return ts === undefined ? undefined : timestampMs(ts);
}

function stateName(s: TaskState): string {
  return TaskState[s] ?? String(s);
}

async function submitOne(env: Env, spec: Omit<MessageInitShape<typeof TaskSpecSchema>, "queue" | "$typeName"> = {}): Promise<string> {
  const res = await env.broker.submit({ tasks: [{ queue: env.queue, ...spec }] });
  check(res.results.length === 1, `Submit returned ${res.results.length} results, want 1`);
  return res.results[0]!.taskId;
}

async function leaseOne(env: Env, leaseMs: number, waitMs = 0): Promise<LeasedTask> {
  const res = await env.broker.lease(
    {
      workerId: WORKER_ID,
      queues: [env.queue],
      maxTasks: 1,
      leaseDuration: durationFromMs(leaseMs),
      wait: durationFromMs(waitMs),
    },
    { timeoutMs: waitMs + 10_000 },
  );
  check(res.tasks.length === 1, `Lease(wait=${waitMs}ms) returned ${res.tasks.length} tasks, want 1`);
  return res.tasks[0]!;
}

async function getState(env: Env, taskId: string) {
  const res = await env.admin.getTask({ taskId });
  check(res.task !== undefined, `GetTask(${taskId}) returned no task`);
  return res.task;
}

const cases: [string, Case][] = [
  [
    "lease_order",
    async (env) => {
      const now = Date.now();
      const tasks: MessageInitShape<typeof TaskSpecSchema>[] = [
        { payload: bytes("a"), priority: 0 },
        { payload: bytes("b"), priority: 5 },
        { payload: bytes("c"), priority: 5, deadline: timestampFromMs(now + 2 * HOUR_MS) },
        { payload: bytes("d"), priority: 5, deadline: timestampFromMs(now + HOUR_MS) },
        { payload: bytes("e"), priority: -1 },
        { payload: bytes("f"), priority: 10, runAt: timestampFromMs(now + HOUR_MS) },
      ].map((t) => ({ ...t, queue: env.queue }));
      const sub = await env.broker.submit({ tasks });
      check(sub.results.length === 6, `Submit returned ${sub.results.length} results, want 6`);
      const res = await env.broker.lease({
        workerId: WORKER_ID,
        queues: [env.queue],
        maxTasks: 10,
        leaseDuration: durationFromMs(30_000),
        wait: durationFromMs(0),
      });
      const got = res.tasks.map((t) => text.decode(t.payload)).join(",");
      check(got === "d,c,b,a,e", `leased payloads [${got}], want [d,c,b,a,e]`);
      const attempts = res.tasks.map((t) => t.attempt);
      check(attempts.every((a) => a === 1), `attempts [${attempts.join(",")}], want all 1`);
      for (const t of res.tasks) {
        await env.broker.complete({ taskId: t.taskId, leaseToken: t.leaseToken });
      }
    },
  ],
  [
    "idempotent_submit",
    async (env) => {
      const first = await env.broker.submit({ tasks: [{ queue: env.queue, key: "order-42" }] });
      const second = await env.broker.submit({ tasks: [{ queue: env.queue, key: "order-42" }] });
      const a = first.results[0];
      const b = second.results[0];
      check(a !== undefined && b !== undefined, "Submit returned no result");
      check(a.taskId === b.taskId, `task ids differ: ${a.taskId} then ${b.taskId}`);
      check(!a.deduplicated && b.deduplicated, `deduplicated ${a.deduplicated} then ${b.deduplicated}, want false then true`);
    },
  ],
  [
    "heartbeat_extends",
    async (env) => {
      const taskId = await submitOne(env);
      const t = await leaseOne(env, 5_000);
      check(t.taskId === taskId, `leased ${t.taskId}, want ${taskId}`);
      const hb = await env.broker.heartbeat({
        workerId: WORKER_ID,
        leases: [{ taskId, leaseToken: t.leaseToken }],
        extendBy: durationFromMs(60_000),
      });
      check(hb.leases.length === 1, `Heartbeat returned ${hb.leases.length} statuses, want 1`);
      const st = hb.leases[0]!;
      check(!st.lost, "Heartbeat reported lost=true for a live lease");
      const before = ms(t.leaseExpiresAt);
      const after = ms(st.leaseExpiresAt);
      check(before !== undefined && after !== undefined, "lease_expires_at unset");
      check(after - before >= 30_000, `lease_expires_at moved by ${after - before} ms, want >= 30000`);
      const stale = await env.broker.heartbeat({
        workerId: WORKER_ID,
        leases: [{ taskId, leaseToken: "stale" }],
      });
      check(stale.leases.length === 1, `stale Heartbeat returned ${stale.leases.length} statuses, want 1`);
      check(stale.leases[0]!.lost, "stale Heartbeat answered lost=false, want true");
    },
  ],
  [
    "checkpoint_handover",
    async (env) => {
      const taskId = await submitOne(env, { retry: { initialBackoff: durationFromMs(0) } });
      const first = await leaseOne(env, 1_000);
      await env.broker.checkpoint({ taskId, leaseToken: first.leaseToken, checkpoint: bytes("step-3") });
      const second = await leaseOne(env, 30_000, 15_000);
      check(second.taskId === taskId, `second lease got ${second.taskId}, want ${taskId}`);
      check(second.attempt === 2, `attempt ${second.attempt}, want 2`);
      check(second.hasCheckpoint, "has_checkpoint false");
      check(text.decode(second.checkpoint) === "step-3", `checkpoint "${text.decode(second.checkpoint)}", want "step-3"`);
      check(
        second.fencingToken > first.fencingToken,
        `fencing_token ${second.fencingToken} not greater than ${first.fencingToken}`,
      );
      await env.broker.complete({ taskId, leaseToken: second.leaseToken });
    },
  ],
  [
    "retryable_fail",
    async (env) => {
      const taskId = await submitOne(env, { retry: { maxAttempts: 3, initialBackoff: durationFromMs(0) } });
      const first = await leaseOne(env, 30_000);
      const res = await env.broker.fail({ taskId, leaseToken: first.leaseToken, errorMessage: "boom" });
      check(
        res.state === TaskState.READY || res.state === TaskState.SCHEDULED,
        `Fail state ${stateName(res.state)}, want READY or SCHEDULED`,
      );
      check(res.nextRunAt !== undefined, "Fail next_run_at unset");
      const second = await leaseOne(env, 30_000, 5_000);
      check(second.taskId === taskId, `second lease got ${second.taskId}, want ${taskId}`);
      check(second.attempt === 2, `attempt ${second.attempt}, want 2`);
      await env.broker.complete({ taskId, leaseToken: second.leaseToken });
    },
  ],
  [
    "non_retryable_fail",
    async (env) => {
      const taskId = await submitOne(env);
      const t = await leaseOne(env, 30_000);
      const res = await env.broker.fail({ taskId, leaseToken: t.leaseToken, errorMessage: "bad input", nonRetryable: true });
      check(res.state === TaskState.DEAD, `Fail state ${stateName(res.state)}, want DEAD`);
      const task = await getState(env, taskId);
      check(task.state === TaskState.DEAD, `GetTask state ${stateName(task.state)}, want DEAD`);
      check(task.lastError === "bad input", `last_error "${task.lastError}", want "bad input"`);
    },
  ],
  [
    "stale_token",
    async (env) => {
      const taskId = await submitOne(env);
      await leaseOne(env, 30_000);
      let err: unknown;
      try {
        await env.broker.complete({ taskId, leaseToken: "stale" });
      } catch (e) {
        err = e;
      }
      check(err !== undefined, "Complete with a stale token succeeded");
      const ce = ConnectError.from(err);
      check(ce.code === Code.Aborted, `status ${Code[ce.code]} (${ce.rawMessage}), want Aborted`);
      const info = errorInfo(ce);
      check(info !== undefined, `no google.rpc.ErrorInfo in the status details (${ce.details.length} details)`);
      check(info.reason === "LEASE_LOST", `ErrorInfo.reason "${info.reason}", want LEASE_LOST`);
      check(info.domain === "taskbroker.dev", `ErrorInfo.domain "${info.domain}", want taskbroker.dev`);
      const task = await getState(env, taskId);
      check(task.state === TaskState.LEASED, `GetTask state ${stateName(task.state)}, want LEASED`);
    },
  ],
  [
    "complete_result",
    async (env) => {
      const taskId = await submitOne(env);
      const t = await leaseOne(env, 30_000);
      await env.broker.complete({ taskId, leaseToken: t.leaseToken, result: bytes("done:42") });
      await env.broker.complete({ taskId, leaseToken: t.leaseToken, result: bytes("done:42") });
      const task = await getState(env, taskId);
      check(task.state === TaskState.SUCCEEDED, `GetTask state ${stateName(task.state)}, want SUCCEEDED`);
      check(text.decode(task.result) === "done:42", `result "${text.decode(task.result)}", want "done:42"`);
    },
  ],
  [
    "cancel_running",
    async (env) => {
      const taskId = await submitOne(env);
      const t = await leaseOne(env, 30_000);
      await env.admin.cancelTask({ taskId });
      const hb = await env.broker.heartbeat({ workerId: WORKER_ID, leases: [{ taskId, leaseToken: t.leaseToken }] });
      const st = hb.leases[0];
      check(st !== undefined, "Heartbeat returned no status");
      check(st.cancelRequested && !st.lost, `cancel_requested=${st.cancelRequested} lost=${st.lost}, want true/false`);
      const res = await env.broker.fail({ taskId, leaseToken: t.leaseToken, errorMessage: "cancelled" });
      check(res.state === TaskState.CANCELLED, `Fail state ${stateName(res.state)}, want CANCELLED`);
    },
  ],
  [
    "bad_input",
    async (env) => {
      let err: unknown;
      try {
        await env.broker.submit({ tasks: [{ queue: "has space" }] });
      } catch (e) {
        err = e;
      }
      check(err !== undefined, "Submit with queue \"has space\" succeeded");
      const ce = ConnectError.from(err);
      check(ce.code === Code.InvalidArgument, `status ${Code[ce.code]} (${ce.rawMessage}), want InvalidArgument`);
      check(ce.rawMessage.includes("tasks[0].queue"), `message "${ce.rawMessage}" does not name tasks[0].queue`);
    },
  ],
  ...specCases,
  [
    "schedule_every",
    async (env) => {
      const id = env.queue;
      const created = await env.schedules.createSchedule({
        schedule: {
          scheduleId: id,
          spec: { kind: { case: "every", value: durationFromMs(1_000) } },
          task: { queue: env.queue, payload: bytes("tick") },
          overlap: OverlapPolicy.ALLOW,
        },
      });
      check(created.schedule?.state === ScheduleState.ACTIVE, `state ${created.schedule?.state}, want ACTIVE`);
      for (let i = 0; i < 2; i++) {
        const t = await leaseOne(env, 30_000, 10_000);
        check(text.decode(t.payload) === "tick", `payload "${text.decode(t.payload)}", want "tick"`);
        check(t.metadata["taskbroker.schedule_id"] === id, `metadata lacks taskbroker.schedule_id=${id}`);
        await env.broker.complete({ taskId: t.taskId, leaseToken: t.leaseToken });
      }
      const got = await env.schedules.getSchedule({ scheduleId: id });
      check((got.schedule?.runs ?? 0n) >= 2n, `runs ${got.schedule?.runs}, want >= 2`);
      await env.schedules.deleteSchedule({ scheduleId: id });
      let err: unknown;
      try {
        await env.schedules.getSchedule({ scheduleId: id });
      } catch (e) {
        err = e;
      }
      check(err !== undefined, "GetSchedule after delete succeeded");
      const ce = ConnectError.from(err);
      check(ce.code === Code.NotFound, `after delete: ${Code[ce.code]}, want NotFound`);
    },
  ],
  ...routingCases,
  ...flowCases,
  ...leaseNextCases,
  ...bindingCases,
  ...typedCases,
  ...resultsCases,
];

function reasonOf(err: unknown): string {
  if (err instanceof Mismatch) return err.message;
  if (err instanceof ConnectError) return `rpc error ${Code[err.code]}: ${err.rawMessage}`;
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}

async function main(): Promise<number> {
  const addr = process.env["TASKBROKER_ADDR"];
  if (!addr) {
    console.error("TASKBROKER_ADDR (host:port) is not set");
    return 2;
  }
  // Every call gets a deadline, so a broker that hangs fails a case instead of the run.
  // TLS, mTLS and the token come from TASKBROKER_CA / _CLIENT_CERT / _CLIENT_KEY / _TOKEN.
  const client = connect(addr, optionsFromEnv({ defaultTimeoutMs: 10_000 }));
  const { broker, admin, schedules } = client;
  let passed = 0;
  let failed = 0;
  for (const [name, run] of cases) {
    const queue = `conf.${LANG}.${name}.${randomBytes(3).toString("hex")}`;
    try {
      await withTimeout(run({ client, broker, admin, schedules, queue }), 40_000);
      console.log(`PASS ${name}`);
      passed++;
    } catch (err) {
      console.log(`FAIL ${name}: ${reasonOf(err).replace(/\s+/g, " ")}`);
      failed++;
    }
  }
  console.log(`${passed} passed, ${failed} failed`);
  return failed > 0 ? 1 : 0;
}

async function withTimeout<T>(p: Promise<T>, timeoutMs: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Mismatch(`case did not finish within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

process.exitCode = await main();
