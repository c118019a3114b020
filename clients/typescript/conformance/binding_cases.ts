/**
 * The `worker_id_binding` case of the scenario: a worker token bound to worker ids
 * (TASKBROKER_WORKER_TOKEN, with --secure) leases under an allowed id, is refused under
 * another with PERMISSION_DENIED, and a Worker under that id stops by itself.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  connect,
  optionsFromEnv,
  TaskState,
  Worker,
  WorkerStoppedError,
  type AdminClient,
  type BrokerClient,
} from "../src/index.js";

const WORKER_ID = "conf-typescript";

interface BindingEnv {
  broker: BrokerClient;
  admin: AdminClient;
  queue: string;
}

class Mismatch extends Error {}

function check(ok: boolean, reason: string): asserts ok {
  if (!ok) throw new Mismatch(reason);
}

function within<T>(ms: number, p: Promise<T>, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Mismatch(what)), ms))]);
}

export const bindingCases: [string, (env: BindingEnv) => Promise<void>][] = [
  [
    "worker_id_binding",
    async (env) => {
      const q = env.queue;
      const sub = await env.broker.submit({ tasks: [{ queue: q, payload: new TextEncoder().encode("bound") }] });
      const id = sub.results[0]!.taskId;
      const token = process.env["TASKBROKER_WORKER_TOKEN"];
      const broker = token
        ? connect(process.env["TASKBROKER_ADDR"]!, { ...optionsFromEnv({ defaultTimeoutMs: 10_000 }), token }).broker
        : env.broker;
      const leaseAs = (workerId: string) =>
        broker.lease({ workerId, queues: [q], maxTasks: 1, leaseDuration: durationFromMs(30_000) });
      const allowed = `${WORKER_ID}-bound-1`;
      const got = (await leaseAs(allowed)).tasks;
      check(got.length === 1 && got[0]!.taskId === id, `Lease as ${allowed} returned ${got.length} tasks, want ${id}`);
      if (token) {
        let err: unknown;
        try {
          await leaseAs(WORKER_ID);
        } catch (e) {
          err = e;
        }
        check(err !== undefined, `Lease as ${WORKER_ID}: OK, want PermissionDenied`);
        const ce = ConnectError.from(err);
        check(
          ce.code === Code.PermissionDenied && ce.rawMessage.includes("worker_id"),
          `Lease as ${WORKER_ID}: ${Code[ce.code]} (${ce.rawMessage}), want PermissionDenied naming worker_id`,
        );
      }
      await broker.complete({ taskId: id, leaseToken: got[0]!.leaseToken });
      const s = (await env.admin.getTask({ taskId: id })).task?.state;
      check(s === TaskState.SUCCEEDED, `the task is ${String(s)}, want SUCCEEDED`);
      if (!token) return;
      const w = new Worker(broker, async () => {}, {
        queues: [q],
        workerId: WORKER_ID,
        pollWaitMs: 1_000,
        onError: () => {},
      });
      let err: unknown;
      try {
        await within(20_000, w.run(), "the worker kept running");
      } catch (e) {
        err = e;
      } finally {
        await w.close();
      }
      check(
        err instanceof WorkerStoppedError && err.code === Code.PermissionDenied,
        `Worker as ${WORKER_ID}: run() ended with ${String(err)}, want WorkerStoppedError PermissionDenied`,
      );
    },
  ],
];
