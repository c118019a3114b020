/**
 * `dependency_results` (a Worker's handler reads its dependency's result on its context),
 * `keys_and_replace` (the submit helper with a dependency on a key and a replace by key; the
 * leased dependent carries its dependency's result) and `submit_backpressure` (a queue's max_pending refuses a Submit with RESOURCE_EXHAUSTED,
 * RetryInfo and QuotaFailure; the client's submit waits the hinted delay and gets in) and
 * `dead_result` (waiting for a task whose handler failed for good is a TaskFailedError).
 */
import { durationFromMs, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import {
  Client,
  QuotaFailureSchema,
  RetryInfoSchema,
  TaskState,
  DuplicateKeyPolicy,
  connect,
  optionsFromEnv,
  PermanentError,
  TaskFailedError,
  wait,
  Worker,
} from "../src/index.js";

const WORKER_ID = "conf-typescript";
const utf8 = new TextEncoder();
const text = new TextDecoder();

interface ResultsEnv {
  client: Client;
  queue: string;
}

class Mismatch extends Error {}

function check(ok: boolean, reason: string): asserts ok {
  if (!ok) throw new Mismatch(reason);
}

export const resultsCases: [string, (env: ResultsEnv) => Promise<void>][] = [
  [
    "dependency_results",
    async ({ client, queue }) => {
      const a = await client.submit(queue, utf8.encode("a"));
      const b = await client.submit(queue, utf8.encode("b"), { dependsOn: [a.taskId] });
      let seen: Record<string, string> | undefined;
      const worker = new Worker(client, async (ctx) => {
        if (ctx.taskId === a.taskId) return "a-result";
        seen = Object.fromEntries(Object.entries(ctx.dependencyResults).map(([id, r]) => [id, text.decode(r)]));
        return ctx.dependencyResults[a.taskId];
      }, { queues: [queue], workerId: WORKER_ID, pollWaitMs: 1_000, onError: () => {} });
      const run = worker.run({ handleSignals: false });
      try {
        await wait(client, b.taskId, { timeoutMs: 20_000 });
      } finally {
        await worker.stop(5_000);
        await run;
      }
      const want = JSON.stringify({ [a.taskId]: "a-result" });
      check(JSON.stringify(seen) === want, `b's handler saw dependency_results ${JSON.stringify(seen)}, want ${want}`);
      const tb = (await client.admin.getTask({ taskId: b.taskId })).task!;
      check(
        tb.state === TaskState.SUCCEEDED && text.decode(tb.result) === "a-result",
        `b is ${TaskState[tb.state]} with result ${JSON.stringify(text.decode(tb.result))}, want SUCCEEDED with a-result`,
      );
    },
  ],
  [
    "keys_and_replace",
    async ({ client, queue }) => {
      const lease = (waitMs: number) =>
        client.broker.lease({
          workerId: WORKER_ID,
          queues: [queue],
          maxTasks: 10,
          leaseDuration: durationFromMs(30_000),
          wait: durationFromMs(waitMs),
        });
      const state = async (taskId: string) => (await client.admin.getTask({ taskId })).task!.state;

      const b = await client.submit(queue, utf8.encode("b"), { dependsOnKeys: [{ queue, key: "k-a" }] });
      const blocked = await state(b.taskId);
      check(blocked === TaskState.BLOCKED, `b is ${TaskState[blocked]} before k-a exists, want BLOCKED`);

      const now = Date.now();
      const d1 = await client.submit(queue, utf8.encode("v1"), { key: "digest", runAt: timestampFromMs(now + 3_600_000) });
      const d2 = await client.submit(queue, utf8.encode("v2"), {
        key: "digest",
        runAt: timestampFromMs(now),
        onDuplicateKey: DuplicateKeyPolicy.REPLACE_WAITING,
      });
      check(
        d2.taskId === d1.taskId && d2.deduplicated && d2.replaced,
        `the second submit of digest answered ${d2.taskId} deduplicated=${d2.deduplicated} replaced=${d2.replaced}, want ${d1.taskId} deduplicated=true replaced=true`,
      );

      const a = await client.submit(queue, utf8.encode("a"), { key: "k-a" });
      const first = await lease(0);
      const got = first.tasks.map((t) => `${t.taskId}=${text.decode(t.payload)}`).sort().join(",");
      const want = [`${a.taskId}=a`, `${d1.taskId}=v2`].sort().join(",");
      check(got === want, `the first Lease returned [${got}], want [${want}] (a, and d with payload v2)`);
      for (const t of first.tasks) {
        await client.broker.complete({
          taskId: t.taskId,
          leaseToken: t.leaseToken,
          ...(t.taskId === a.taskId ? { result: utf8.encode("a-result") } : {}),
        });
      }
      const ready = await state(b.taskId);
      check(ready === TaskState.READY, `b is ${TaskState[ready]} after a's Complete, want READY`);

      const second = await lease(5_000);
      check(
        second.tasks.length === 1 && second.tasks[0]!.taskId === b.taskId,
        `the second Lease returned [${second.tasks.map((t) => text.decode(t.payload)).join(",")}], want exactly b`,
      );
      const tb = second.tasks[0]!;
      const results = JSON.stringify(Object.fromEntries(Object.entries(tb.dependencyResults).map(([id, r]) => [id, text.decode(r)])));
      const wantResults = JSON.stringify({ [a.taskId]: "a-result" });
      check(results === wantResults, `b's dependency_results ${results}, want ${wantResults}`);
      await client.broker.complete({ taskId: tb.taskId, leaseToken: tb.leaseToken });
    },
  ],
  [
    "submit_backpressure",
    async ({ client, queue }) => {
      await client.admin.updateQueue({ name: queue, config: { maxPending: 1n }, updateMask: { paths: ["max_pending"] } });
      await client.submit(queue, utf8.encode("1"));
      let refusal: unknown;
      try {
        await client.broker.submit({ tasks: [{ queue, payload: utf8.encode("2") }] });
      } catch (err) {
        refusal = err;
      }
      check(
        refusal instanceof ConnectError && refusal.code === Code.ResourceExhausted,
        `Submit 2 over max_pending answered ${refusal instanceof ConnectError ? Code[refusal.code] : "OK"}, want RESOURCE_EXHAUSTED`,
      );
      const retry = refusal.findDetails(RetryInfoSchema).length;
      const quota = refusal.findDetails(QuotaFailureSchema).length;
      check(retry === 1 && quota === 1, `RESOURCE_EXHAUSTED carries ${retry} RetryInfo and ${quota} QuotaFailure, want one of each`);
      const listed = await client.admin.listTasks({ queue });
      check(listed.tasks.length === 1, `the refused Submit left ${listed.tasks.length} tasks, want 1`);

      // A client whose interceptor says when a Submit through it is first refused.
      let refused!: () => void;
      const firstRefusal = new Promise<void>((resolve) => (refused = resolve));
      const observe: Interceptor = (next) => async (req) => {
        try {
          return await next(req);
        } catch (err) {
          if (err instanceof ConnectError && err.code === Code.ResourceExhausted) refused();
          throw err;
        }
      };
      const watched = connect(process.env["TASKBROKER_ADDR"]!, optionsFromEnv({ defaultTimeoutMs: 10_000, interceptors: [observe] }));
      try {
        const submitted = watched.submit(queue, utf8.encode("2"));
        submitted.catch(() => {}); // awaited below; a case that fails first must not leave it unhandled
        const first = await Promise.race([firstRefusal.then(() => "refused"), submitted.then(() => "submitted")]);
        check(first === "refused", "the client's submit returned before any refusal");
        const leased = await client.broker.lease({
          workerId: WORKER_ID,
          queues: [queue],
          maxTasks: 1,
          leaseDuration: durationFromMs(30_000),
          wait: durationFromMs(0),
        });
        check(
          leased.tasks.length === 1 && text.decode(leased.tasks[0]!.payload) === "1",
          `Lease returned ${leased.tasks.length} tasks, want task 1`,
        );
        await client.broker.complete({ taskId: leased.tasks[0]!.taskId, leaseToken: leased.tasks[0]!.leaseToken });
        const second = await submitted;
        const t2 = (await client.admin.getTask({ taskId: second.taskId })).task!;
        check(text.decode(t2.payload) === "2", `task 2 has payload ${JSON.stringify(text.decode(t2.payload))}`);
      } finally {
        await watched.close();
      }
    },
  ],
  [
    "dead_result",
    async ({ client, queue }) => {
      const d = await client.submit(queue, "order-7");
      const quiet = { warn() {}, error() {} };
      const worker = new Worker(client, async () => {
        throw new PermanentError("no such order");
      }, { queues: [queue], workerId: WORKER_ID, pollWaitMs: 1_000, onError: () => {}, logger: quiet });
      const run = worker.run({ handleSignals: false });
      let waited: unknown;
      try {
        await wait(client, d.taskId, { timeoutMs: 20_000 });
      } catch (e) {
        waited = e;
      } finally {
        await worker.stop(5_000);
        await run;
      }
      let read: unknown;
      try {
        await client.getResult(d.taskId);
      } catch (e) {
        read = e;
      }
      for (const [what, e] of [["wait", waited], ["getResult", read]] as const) {
        check(e instanceof TaskFailedError, `${what} ended with ${String(e)}, want a TaskFailedError`);
        check(
          e.taskId === d.taskId && e.state === TaskState.DEAD && e.lastError === "no such order",
          `${what}: TaskFailedError {${e.taskId}, ${TaskState[e.state]}, ${JSON.stringify(e.lastError)}}, want {${d.taskId}, DEAD, "no such order"}`,
        );
      }
    },
  ],
];
