/**
 * The routing cases of the scenario: `targeted_task` and `sticky_retry`, on the
 * broker stubs with the client's `target` / `sticky` builders.
 */
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { target, sticky, TaskState, type BrokerClient, type LeasedTask } from "../src/index.js";

const WORKER_ID = "conf-typescript";
const utf8 = new TextEncoder();
const text = new TextDecoder();

interface RoutingEnv {
  broker: BrokerClient;
  queue: string;
}

class Mismatch extends Error {}

function check(ok: boolean, reason: string): asserts ok {
  if (!ok) throw new Mismatch(reason);
}

async function leaseAs(env: RoutingEnv, workerId: string, labels: Record<string, string> = {}, waitMs = 0): Promise<LeasedTask[]> {
  const res = await env.broker.lease(
    {
      workerId,
      queues: [env.queue],
      maxTasks: 10,
      leaseDuration: durationFromMs(30_000),
      wait: durationFromMs(waitMs),
      labels,
    },
    { timeoutMs: waitMs + 10_000 },
  );
  return res.tasks;
}

const payloads = (tasks: LeasedTask[]): string => JSON.stringify(tasks.map((t) => text.decode(t.payload)));

async function complete(env: RoutingEnv, t: LeasedTask): Promise<void> {
  await env.broker.complete({ taskId: t.taskId, leaseToken: t.leaseToken });
}

export const routingCases: [string, (env: RoutingEnv) => Promise<void>][] = [
  [
    "targeted_task",
    async (env) => {
      const elsewhere = `${WORKER_ID}-elsewhere`;
      await env.broker.submit({
        tasks: [
          { queue: env.queue, payload: utf8.encode("a"), target: target({ labels: { gpu: "a100" } }) },
          { queue: env.queue, payload: utf8.encode("b"), target: target({ workerId: elsewhere }) },
        ],
      });
      let got = await leaseAs(env, WORKER_ID);
      check(got.length === 0, `a worker without labels leased ${payloads(got)}`);
      const carrying = { gpu: "a100", region: "eu" };
      got = await leaseAs(env, WORKER_ID, carrying);
      check(payloads(got) === '["a"]', `the labelled worker leased ${payloads(got)}, want ["a"]`);
      await complete(env, got[0]!);
      got = await leaseAs(env, WORKER_ID, carrying);
      check(got.length === 0, `the labelled worker leased ${payloads(got)}, a task targeted at another worker`);
      got = await leaseAs(env, elsewhere);
      check(payloads(got) === '["b"]', `${elsewhere} leased ${payloads(got)}, want ["b"]`);
      await complete(env, got[0]!);
    },
  ],
  [
    "sticky_retry",
    async (env) => {
      await env.broker.submit({
        tasks: [
          {
            queue: env.queue,
            payload: utf8.encode("s"),
            retry: { maxAttempts: 3, initialBackoff: durationFromMs(0) },
            sticky: sticky("soft", { timeoutMs: 60_000 }),
          },
        ],
      });
      const got = await leaseAs(env, WORKER_ID);
      check(got.length === 1, `leased ${got.length} tasks, want 1`);
      const first = got[0]!;
      const failed = await env.broker.fail({ taskId: first.taskId, leaseToken: first.leaseToken, errorMessage: "boom" });
      check(
        failed.state === TaskState.READY || failed.state === TaskState.SCHEDULED,
        `Fail: state ${TaskState[failed.state]}, want READY or SCHEDULED`,
      );
      const other = `${WORKER_ID}-other`;
      const stolen = await leaseAs(env, other);
      check(stolen.length === 0, `${other} leased the retry reserved for ${WORKER_ID}`);
      const again = await leaseAs(env, WORKER_ID, {}, 5_000);
      check(
        again.length === 1 && again[0]!.taskId === first.taskId && again[0]!.attempt === 2,
        `${WORKER_ID} leased ${again.length} tasks (attempts ${again.map((t) => t.attempt).join(",")}), want the retry with attempt 2`,
      );
      await complete(env, again[0]!);
    },
  ],
];
