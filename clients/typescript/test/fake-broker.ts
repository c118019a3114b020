/**
 * An in-memory BrokerService behind a real HTTP/2 gRPC server on 127.0.0.1:0, for testing the
 * worker runtime without a broker. It records every call; tests steer it through `tasks`,
 * `lostIds` and `cancelIds`.
 */
import { createServer, type Http2Server, type ServerHttp2Session } from "node:http2";
import type { AddressInfo } from "node:net";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type ConnectRouter, type HandlerContext } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import {
  ErrorInfoSchema,
  BrokerService,
  LeasedTaskSchema,
  TaskState,
  CompleteOutcome,
  type CompleteManyRequest,
  type CompleteRequest,
  type FailRequest,
  type HeartbeatRequest,
  type LeaseRequest,
  type SubmitRequest,
  type LeasedTask,
} from "../src/index.js";

export class FakeBroker {
  /** Tasks not yet leased, leased first-in first-out. */
  readonly tasks: LeasedTask[] = [];
  /** Submits are recorded, then refused (UNIMPLEMENTED). */
  readonly submits: SubmitRequest[] = [];
  readonly leases: LeaseRequest[] = [];
  readonly heartbeats: HeartbeatRequest[] = [];
  /** Every completion, whether it came alone (Complete) or in a CompleteMany. */
  readonly completes: CompleteRequest[] = [];
  /** The Complete calls alone. */
  readonly completeCalls: CompleteRequest[] = [];
  readonly completeManys: CompleteManyRequest[] = [];
  /** While set, Complete and CompleteMany wait for it before they answer. */
  hold: Promise<void> | undefined;
  /** CompleteMany is refused as a whole with this code (as a broker without it would). */
  refuseMany: Code | undefined;
  readonly fails: FailRequest[] = [];
  readonly checkpoints = new Map<string, Uint8Array>();
  /** Heartbeats report these task ids lost. */
  readonly lostIds = new Set<string>();
  /** Heartbeats report cancel_requested for these task ids. */
  readonly cancelIds = new Set<string>();
  /** Calls (by method: "complete", "fail", ...) answered UNAVAILABLE this many more times. */
  readonly unavailable = new Map<string, number>();
  /** Calls (by method) that get no answer until their deadline, as from a frozen broker. */
  readonly frozen = new Set<string>();
  /** Deadlines (ms, or undefined) the calls arrived with, by method. */
  readonly deadlines = new Map<string, number | undefined>();
  /** Lease expiry handed out with each task, ms from the Lease. */
  leaseMs = 30_000;
  /** How many Lease calls are waiting right now. */
  pendingLeases = 0;

  #server: Http2Server | undefined;
  readonly #sessions = new Set<ServerHttp2Session>();
  #wake = new Set<() => void>();
  #seq = 0;

  /** Adds a task with this payload; returns its id. */
  add(payload: string | Uint8Array, attempt = 1, queue = "q"): string {
    const id = `t${++this.#seq}`;
    this.tasks.push(
      create(LeasedTaskSchema, {
        taskId: id,
        queue,
        payload: typeof payload === "string" ? new TextEncoder().encode(payload) : payload,
        attempt,
        leaseToken: `tok-${id}`,
        fencingToken: BigInt(this.#seq),
      }),
    );
    for (const wake of this.#wake) wake();
    return id;
  }

  async start(): Promise<string> {
    const routes = (router: ConnectRouter) =>
      router.service(BrokerService, this.#faulty({
        submit: (req) => {
          this.submits.push(req);
          throw new ConnectError("not faked", Code.Unimplemented);
        },
        lease: (req, ctx) => this.#lease(req, ctx),
        heartbeat: (req) => {
          this.heartbeats.push(req);
          return {
            leases: req.leases.map((l) => ({
              taskId: l.taskId,
              lost: this.lostIds.has(l.taskId),
              cancelRequested: this.cancelIds.has(l.taskId),
              leaseExpiresAt: timestampFromMs(Date.now() + 30_000),
            })),
          };
        },
        checkpoint: (req) => {
          if (this.lostIds.has(req.taskId)) {
            throw new ConnectError("lease lost", Code.Aborted);
          }
          this.checkpoints.set(req.taskId, req.checkpoint);
          return { cancelRequested: this.cancelIds.has(req.taskId) };
        },
        complete: async (req) => {
          this.completeCalls.push(req);
          this.completes.push(req);
          await this.hold;
          if (this.lostIds.has(req.taskId)) {
            throw new ConnectError("lease lost", Code.Aborted, undefined, [
              { desc: ErrorInfoSchema, value: { reason: "LEASE_LOST", domain: "taskbroker.dev" } },
            ]);
          }
          return {};
        },
        completeMany: async (req) => {
          this.completeManys.push(req);
          this.completes.push(...req.completions);
          await this.hold;
          if (this.refuseMany !== undefined) throw new ConnectError("not here", this.refuseMany);
          return {
            results: req.completions.map((c) => ({
              taskId: c.taskId,
              outcome: this.lostIds.has(c.taskId) ? CompleteOutcome.LEASE_LOST : CompleteOutcome.COMPLETED,
            })),
          };
        },
        fail: (req) => {
          this.fails.push(req);
          return { state: req.nonRetryable ? TaskState.DEAD : TaskState.READY };
        },
      }));
    this.#server = createServer(connectNodeAdapter({ routes }));
    // close() must not wait for clients' idle connections: track them to destroy them.
    this.#server.on("session", (s: ServerHttp2Session) => {
      this.#sessions.add(s);
      s.on("close", () => this.#sessions.delete(s));
    });
    await new Promise<void>((resolve) => this.#server!.listen(0, "127.0.0.1", resolve));
    return `127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  /** Wraps each method with the faults steered by `unavailable` and `frozen`. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  #faulty<T extends Record<string, (req: any, ctx: HandlerContext) => unknown>>(impl: T): T {
    const out: Record<string, unknown> = {};
    for (const [name, fn] of Object.entries(impl)) {
      out[name] = async (req: unknown, ctx: HandlerContext) => {
        const left = ctx.timeoutMs();
        this.deadlines.set(name, left);
        const n = this.unavailable.get(name) ?? 0;
        if (n > 0) {
          this.unavailable.set(name, n - 1);
          throw new ConnectError("connection refused", Code.Unavailable);
        }
        if (this.frozen.has(name)) {
          await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve(), { once: true }));
          throw new ConnectError("frozen", Code.DeadlineExceeded);
        }
        return fn(req, ctx);
      };
    }
    return out as T;
  }

  /** Client connections open now. */
  get connections(): number {
    return this.#sessions.size;
  }

  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => (this.#server ? this.#server.close(() => resolve()) : resolve()));
    for (const s of this.#sessions) s.destroy();
    await closed;
  }

  async #lease(req: LeaseRequest, ctx: HandlerContext) {
    this.leases.push(req);
    const waitMs = req.wait ? Number(req.wait.seconds) * 1000 + req.wait.nanos / 1e6 : 0;
    if (this.tasks.length === 0 && waitMs > 0) {
      this.pendingLeases++;
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          this.#wake.delete(done);
          ctx.signal.removeEventListener("abort", done);
          resolve();
        };
        const timer = setTimeout(done, waitMs);
        this.#wake.add(done);
        ctx.signal.addEventListener("abort", done);
      });
      this.pendingLeases--;
    }
    const tasks = this.tasks.splice(0, req.maxTasks);
    for (const t of tasks) t.leaseExpiresAt = timestampFromMs(Date.now() + this.leaseMs);
    return { tasks };
  }
}

/** Polls `cond` every 10 ms until it holds or `timeoutMs` passes. */
export async function until(cond: () => boolean, timeoutMs = 5_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 10));
  }
}
