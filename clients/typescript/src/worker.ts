/**
 * Worker: runs handlers over tasks leased from a broker.
 *
 * - Handlers are registered per queue (`handle(queue, fn)`, a `handlers` map, or one handler
 *   for `queues`); typed handlers get the payload decoded by the serializer (JSON by default)
 *   and return the result to encode, raw ones (the `new Worker(broker, fn, { queues })` form)
 *   work on bytes. Middleware runs around every handler call, the first registered outermost.
 * - One lease loop long-polls Lease, for all registered queues, for exactly as many tasks as
 *   there are free slots.
 * - One heartbeat loop extends every running lease in a single Heartbeat call, about every
 *   third of the lease duration, and aborts a task's signal when its lease is lost or an
 *   operator asks to cancel it.
 * - A handler's result is reported with Complete, through the completer (completer.ts: while
 *   one call is in flight the next ones queue and go as one CompleteMany); a thrown
 *   PermanentError with Fail(non_retryable); any other error with Fail, so the broker's retry
 *   policy applies. A payload that does not decode fails the attempt as non-retryable.
 * - stop() (or close(), `await using`, the `signal` given to run(), or SIGTERM/SIGINT unless
 *   `handleSignals: false`) stops leasing and drains; after its timeout it aborts the handlers'
 *   signals, hands back (Fail, retry_after 0: READY at once) the tasks of handlers still
 *   running a second later, and returns within the timeout + 2 s whatever they or the broker do.
 * - A Complete or Fail that meets an unreachable broker is retried with backoff until the
 *   lease's expiry is near (the lease token stays valid across a broker restart).
 * - A task's signal is aborted (kind "lost") when its lease expires by the local clock, whether
 *   or not the broker answers heartbeats.
 * - A raw handler's result that is not a Uint8Array, string or undefined, or a typed handler's
 *   result the serializer cannot encode, fails the task at once.
 * - A Lease refused with UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT or UNIMPLEMENTED
 *   stops the worker: run() rejects with WorkerStoppedError. With `failFast`, so does a Lease
 *   that fails for a reason of configuration (TLS or plaintext mismatch, a certificate not
 *   trusted, a port that does not speak gRPC). Other errors are retried after a jittered
 *   backoff. A task's deadline aborts its signal (kind "deadline").
 * - Metrics go through the OpenTelemetry API (metrics.ts); `completed` and `failed` listeners
 *   hear of each settled attempt.
 * - With `leaseNext` (the default), a finished task's Complete or Fail also leases the next
 *   task for the slot it frees (`leaseNext` on the settle, no wait), which then runs like a
 *   leased one: two calls per task instead of three. When none comes back, the long-poll Lease
 *   goes on. Never asked for while stopping. `leaseNext: false` turns it off.
 *
 * Defaults follow docs/client-spec.md (see DEFAULTS in spec.ts).
 */
import { hostname } from "node:os";
import { performance } from "node:perf_hooks";
import { Code, ConnectError } from "@connectrpc/connect";
import { durationFromMs, timestampDate } from "@bufbuild/protobuf/wkt";
import type { LeasedTask } from "./gen/taskbroker/v1/broker_pb.js";
import { Client, type BrokerClient } from "./client.js";
import { TaskContext } from "./context.js";
import { WorkerStoppedError } from "./errors.js";
import { backoffMs, checkWorkerOptions, DEFAULTS, heartbeatIntervalMs, stopsWorker } from "./spec.js";
import { MAX_LABELS } from "./routing.js";
import { inProcessSpan } from "./tracing.js";
import { Completer } from "./completer.js";
import {
  handler,
  isHandler,
  rawRoute,
  typedRoute,
  withMiddleware,
  type Handler,
  type HandlerDefinition,
  type HandlerOptions,
  type Middleware,
  type Route,
  type TypedHandler,
} from "./handlers.js";
import { WorkerMetrics } from "./metrics.js";
import { json, type Serializer } from "./serializer.js";
import type { Logger, RunOptions, WorkerEvents, WorkerOptions } from "./worker_options.js";
import { onStopSignal } from "./signals.js";
import { wrongForGood } from "./failfast.js";
import { classify, leasePlan, retryOf, type QueuePolicy, type TaskDef } from "./policy.js";
import { heartbeatLoop, watchExpiry } from "./worker_heartbeat.js";
import { settle, type Outcome, type Settler } from "./worker_settle.js";
import { plain, settlesWithin, sleep, type Running } from "./worker_support.js";

export type { Logger, WorkerOptions, RunOptions, WorkerEvents } from "./worker_options.js";
export { failRequest } from "./worker_support.js";


export class Worker<Data = unknown, Result = unknown> {
  readonly workerId: string;
  readonly #broker: BrokerClient;
  readonly #routes = new Map<string, Route>();
  /** Each queue's policy declared with its handler (policy.ts). */
  readonly #policies = new Map<string, QueuePolicy>();
  readonly #client: Client | undefined;
  readonly #middleware: Middleware[];
  readonly #serializer: Serializer;
  readonly #concurrency: number;
  readonly #leaseDurationMs: number;
  readonly #pollWaitMs: number;
  readonly #heartbeatIntervalMs: number;
  readonly #stopTimeoutMs: number;
  readonly #failFast: boolean;
  readonly #onError: (err: unknown, during: string) => void;
  readonly #log: Logger;
  readonly #metrics: WorkerMetrics;
  readonly #completer: Completer;
  /** What settling a task needs (worker_settle.ts). */
  readonly #settler: Settler;
  readonly #listeners: { [E in keyof WorkerEvents]: Set<WorkerEvents<Result>[E]> } = { completed: new Set(), failed: new Set() };
  /** Aborted when a stop's margin runs out: settles still retried then are abandoned. */
  readonly #abandon = new AbortController();
  /** Sent with every Lease (routing). */
  readonly labels: Readonly<Record<string, string>>;
  readonly #leaseNext: boolean;
  #leaseNextTasks = 0;
  /** Set once stop() gave up waiting: a task a settle brings after that is aborted at once. */
  #stopTimedOut = false;

  readonly #running = new Map<string, Running>();
  /** Aborts the in-flight long poll and the loops' sleeps on stop(). */
  readonly #stopping = new AbortController();
  /** Ends the heartbeat loop once the last task has drained after stop(). */
  readonly #heartbeatStop = new AbortController();
  /** Resolves the lease loop's wait for a free slot. */
  #slotFreed: (() => void) | undefined;
  #runPromise: Promise<void> | undefined;
  #failure: WorkerStoppedError | undefined;

  /**
   * A worker with typed handlers: `handler` for `queues`, a `handlers` map, or `handle()` calls
   * before run().
   */
  constructor(client: Client | BrokerClient, options: WorkerOptions<Data, Result>);
  /** A worker running one raw handler (bytes in, bytes, a string or nothing out) over `queues`. */
  constructor(client: Client | BrokerClient, handler: Handler, options: WorkerOptions<Data, Result> & { queues: string[] });
  constructor(
    client: Client | BrokerClient,
    handlerOrOptions: Handler | WorkerOptions<Data, Result>,
    maybeOptions?: WorkerOptions<Data, Result>,
  ) {
    const raw = typeof handlerOrOptions === "function" ? handlerOrOptions : undefined;
    const options: WorkerOptions<Data, Result> = (raw ? maybeOptions : (handlerOrOptions as WorkerOptions<Data, Result>)) ?? {};
    this.#broker = client instanceof Client ? client.broker : client;
    this.#client = client instanceof Client ? client : undefined;
    this.#serializer = options.serializer ?? (client instanceof Client ? client.serializer : json);
    this.workerId = options.workerId ?? `${hostname()}-${process.pid}`;
    this.#concurrency = options.concurrency ?? DEFAULTS.concurrency;
    this.#leaseDurationMs = options.leaseDurationMs ?? DEFAULTS.leaseDurationMs;
    this.#pollWaitMs = options.pollWaitMs ?? DEFAULTS.pollWaitMs;
    this.#heartbeatIntervalMs = options.heartbeatIntervalMs ?? heartbeatIntervalMs(this.#leaseDurationMs);
    this.#stopTimeoutMs = options.stopTimeoutMs ?? DEFAULTS.stopTimeoutMs;
    this.#failFast = options.failFast ?? false;
    this.#log = options.logger ?? console;
    this.#onError = options.onError ?? ((err, during) => console.error(`taskbroker worker: ${during}:`, err));
    const labels = { ...options.labels };
    if (Object.keys(labels).length > MAX_LABELS) {
      throw new RangeError(`Worker: labels: at most ${MAX_LABELS}, got ${Object.keys(labels).length}`);
    }
    this.labels = labels;
    this.#leaseNext = options.leaseNext ?? true;
    this.#middleware = [...(options.middleware ?? [])];
    const queues = options.queues ?? [];
    if (raw) {
      if (options.handler) throw new TypeError("Worker: give a raw handler or options.handler, not both");
      for (const q of queues) this.#route(q, rawRoute(raw));
    } else if (options.handler) {
      if (queues.length === 0) throw new RangeError("Worker: handler needs queues to run it on");
      for (const q of queues) this.#route(q, typedRoute(q, options.handler, this.#serializer));
    } else if (queues.length > 0) {
      throw new TypeError("Worker: queues were given without a handler for them");
    }
    for (const [q, h] of Object.entries(options.handlers ?? {})) {
      if (!isHandler(h)) throw new TypeError(`Worker: handlers.${q} is not a function or a handler() definition`);
      this.#route(q, typedRoute(q, h, this.#serializer));
    }
    // Every setting but the queues, which handle() may still add to.
    checkWorkerOptions({ ...this.settings, queues: ["-"] });
    if (raw && queues.length === 0) checkWorkerOptions({ ...this.settings, queues });
    this.#metrics = new WorkerMetrics(options.meterProvider);
    this.#completer = new Completer(this.#broker, this.#metrics, { signal: this.#abandon.signal, timeoutMs: DEFAULTS.callTimeoutMs });
    this.#settler = {
      broker: this.#broker,
      completer: this.#completer,
      metrics: this.#metrics,
      log: this.#log,
      abandon: this.#abandon.signal,
      nextLease: () => this.#nextLease(),
      onError: (err, during) => this.#onError(err, during),
      completed: (ctx, value) => this.#emit("completed", ctx, value as Result),
      failed: (ctx, error, state) => this.#emit("failed", ctx, error, state),
    };
  }

  /**
   * Registers a typed handler for `queue`: its payload is decoded by the serializer (and
   * `options.validate`) and its return value encoded as the result. Before run() only.
   */
  handle<D = Data, R = Result>(queue: string, fn: TypedHandler<D, R> | HandlerDefinition<D, R>, options: HandlerOptions<D> = {}): this {
    if (!isHandler(fn)) throw new TypeError(`Worker: the handler for queue ${queue} is not a function`);
    const def = typeof fn === "function" ? handler(fn, options) : handler(fn.fn, { ...fn, ...options });
    this.#route(queue, typedRoute(queue, def, this.#serializer));
    if (def.policy) this.#setPolicy(queue, def.policy);
    return this;
  }

  /** Registers the handler of a `defineTask` definition's queue, under its policy. */
  task<P, R>(def: TaskDef<P, R>, fn: TypedHandler<P, R>, options: HandlerOptions<P> = {}): this {
    return this.handle<P, R>(def.queue, fn, def.policy ? { policy: def.policy, ...options } : options);
  }

  #setPolicy(queue: string, policy: QueuePolicy): void {
    this.#policies.set(queue, policy);
    const retry = retryOf(policy);
    if (retry && this.#client) this.#client.retryDefaults.set(queue, retry);
  }

  /** The queues to lease from and how many tasks at most, less the queues that are full. */
  #leasePlan(free: number): { queues: string[]; maxTasks: number } {
    const limits = new Map<string, number>();
    for (const [q, p] of this.#policies) if (p.concurrency) limits.set(q, p.concurrency);
    const running = new Map<string, number>();
    for (const r of this.#running.values()) if (!r.returned) running.set(r.ctx.queue, (running.get(r.ctx.queue) ?? 0) + 1);
    return leasePlan(this.queues, limits, running, free);
  }

  /** Adds a middleware, inside those registered before it. Before run() only. */
  use(middleware: Middleware): this {
    if (typeof middleware !== "function") throw new TypeError("Worker: middleware must be a function");
    this.#notRunning("use()");
    this.#middleware.push(middleware);
    return this;
  }

  /** Listens to settled attempts: `completed` and `failed`. */
  on<E extends keyof WorkerEvents>(event: E, listener: WorkerEvents<Result>[E]): this {
    const set = this.#listeners[event] as Set<WorkerEvents<Result>[E]> | undefined;
    if (!set) throw new RangeError(`Worker: no event ${String(event)}; there are completed and failed`);
    set.add(listener);
    return this;
  }

  /** Stops listening. */
  off<E extends keyof WorkerEvents>(event: E, listener: WorkerEvents<Result>[E]): this {
    (this.#listeners[event] as Set<WorkerEvents<Result>[E]> | undefined)?.delete(listener);
    return this;
  }

  /** The queues with a handler, leased from in one Lease call. */
  get queues(): string[] {
    return [...this.#routes.keys()];
  }

  /** Completions queued behind the settle call in flight (they go as one CompleteMany). */
  get pendingCompletions(): number {
    return this.#completer.pending;
  }

  #route(queue: string, route: Route): void {
    this.#notRunning("adding a handler");
    if (typeof queue !== "string" || queue.length === 0) throw new RangeError(`Worker: ${JSON.stringify(queue)} is not a queue name`);
    if (this.#routes.has(queue)) throw new RangeError(`Worker: queue ${queue} already has a handler`);
    this.#routes.set(queue, route);
  }

  #notRunning(what: string): void {
    if (this.#runPromise) throw new Error(`Worker: ${what} after run(): register handlers and middleware first`);
  }

  /** How many tasks came back in a settle's nextTasks (and ran) so far. */
  get leaseNextTasks(): number {
    return this.#leaseNextTasks;
  }

  /** Tasks currently being worked on. */
  get inFlight(): number {
    return this.#running.size;
  }

  /** The settings in effect, defaults filled in. */
  get settings() {
    return {
      concurrency: this.#concurrency,
      leaseDurationMs: this.#leaseDurationMs,
      pollWaitMs: this.#pollWaitMs,
      heartbeatIntervalMs: this.#heartbeatIntervalMs,
      stopTimeoutMs: this.#stopTimeoutMs,
    };
  }

  /**
   * Leases and runs tasks until stop(), `signal` aborts or (with `handleSignals`) SIGTERM or
   * SIGINT arrives; resolves once every started task is settled. Rejects with
   * WorkerStoppedError when the broker refused the worker for good.
   */
  run(options: RunOptions = {}): Promise<void> {
    if (this.#runPromise) {
      return this.#runPromise;
    }
    checkWorkerOptions({ ...this.settings, queues: this.queues });
    const onStop = () => void this.stop().catch(() => {});
    options.signal?.addEventListener("abort", onStop, { once: true });
    if (options.signal?.aborted) onStop();
    const unlisten = options.handleSignals === false ? () => {} : onStopSignal(onStop);
    this.#runPromise = this.#run().finally(() => {
      options.signal?.removeEventListener("abort", onStop);
      unlisten();
    });
    return this.#runPromise;
  }

  /** stop() with the worker's stop timeout; resolves at once for a worker never run. */
  close(): Promise<void> {
    return this.stop();
  }

  /** `await using worker = new Worker(...)`: close() at the end of the scope. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /**
   * Stops leasing and waits for running tasks to finish. After `timeoutMs` (default the
   * worker's stopTimeoutMs) their signals are aborted (kind "stopping"); the tasks of handlers
   * still running a second later are handed back (Fail, retryable, retry_after 0, so they are
   * READY at once) and their results discarded. Resolves within `timeoutMs` + 2 s whatever the
   * handlers or the broker do. Never rejects: run() reports why a worker stopped by itself.
   */
  async stop(timeoutMs = this.#stopTimeoutMs): Promise<void> {
    this.#stopping.abort();
    this.#slotFreed?.();
    const run = (this.#runPromise ?? Promise.resolve()).catch(() => {});
    if (await settlesWithin(run, timeoutMs)) {
      return;
    }
    const marginEnd = Date.now() + DEFAULTS.stopMarginMs;
    this.#stopTimedOut = true;
    for (const { ctx } of this.#running.values()) {
      ctx.abort("stopping");
    }
    if (await settlesWithin(run, DEFAULTS.stopGraceMs)) {
      return;
    }
    await this.#handBackRunning();
    await settlesWithin(run, Math.max(0, marginEnd - Date.now()));
    this.#abandon.abort();
    await run;
  }

  /** Hands back, in parallel, every task whose handler is still running (spec point 11). */
  async #handBackRunning(): Promise<void> {
    const left = [...this.#running.values()].filter((r) => !r.returned && !r.lost);
    for (const r of left) {
      r.handedBack = true;
      r.stopWatch();
    }
    this.#slotFreed?.();
    await Promise.all(
      left.map(async ({ ctx, startedAt }) => {
        this.#metrics.task(ctx.queue, "failed", (performance.now() - startedAt) / 1000);
        this.#metrics.settleCall("Fail");
        try {
          await this.#broker.fail(
            { taskId: ctx.taskId, leaseToken: ctx.task.leaseToken, errorMessage: "worker stopped", retryAfter: durationFromMs(0) },
            { timeoutMs: DEFAULTS.handBackTimeoutMs },
          );
          this.#log.warn(`taskbroker worker: task ${ctx.taskId} handed back at stop: its handler did not return in time`);
        } catch (err) {
          this.#log.warn(`taskbroker worker: task ${ctx.taskId}: hand-back at stop failed (${plain(err)}); it returns when its lease expires`);
        }
      }),
    );
  }

  async #run(): Promise<void> {
    const heartbeats = this.#heartbeatLoop();
    await this.#leaseLoop();
    // Heartbeats go on while the last tasks drain, so their leases do not run out. Handlers
    // left behind at stop (their tasks handed back) are not waited for; nor are settles once
    // the stop abandons them.
    const abandoned = new Promise<void>((resolve) => this.#abandon.signal.addEventListener("abort", () => resolve(), { once: true }));
    for (;;) {
      const waiting = [...this.#running.values()].filter((r) => !r.handedBack);
      if (waiting.length === 0 || this.#abandon.signal.aborted) break;
      await Promise.race([Promise.all(waiting.map((r) => r.done)), abandoned]);
    }
    this.#heartbeatStop.abort();
    await heartbeats;
    if (this.#failure) {
      throw this.#failure;
    }
  }

  async #leaseLoop(): Promise<void> {
    const stop = this.#stopping.signal;
    let failures = 0;
    let answered = false;
    while (!stop.aborted) {
      const { queues, maxTasks: free } = this.#leasePlan(this.#concurrency - this.#running.size);
      if (free <= 0) {
        await new Promise<void>((resolve) => (this.#slotFreed = resolve));
        this.#slotFreed = undefined;
        continue;
      }
      try {
        const res = await this.#broker.lease(
          {
            workerId: this.workerId,
            queues,
            maxTasks: free,
            leaseDuration: durationFromMs(this.#leaseDurationMs),
            wait: durationFromMs(this.#pollWaitMs),
            labels: { ...this.labels },
          },
          // The call's deadline leaves the broker room to answer an empty long poll.
          { signal: stop, timeoutMs: this.#pollWaitMs + DEFAULTS.leaseMarginMs },
        );
        failures = 0;
        answered = true;
        for (const task of res.tasks) {
          this.#start(task);
        }
      } catch (err) {
        if (stop.aborted) {
          break;
        }
        if (stopsWorker(err)) {
          const code = (err as ConnectError).code;
          this.#failure = new WorkerStoppedError(`lease refused: ${Code[code]}: ${(err as ConnectError).rawMessage}`, code, err);
          this.#onError(this.#failure, "lease");
          this.#stopping.abort();
          break;
        }
        const why = this.#failFast ? wrongForGood(err, !answered) : undefined;
        if (why !== undefined) {
          const code = err instanceof ConnectError ? err.code : Code.Unknown;
          this.#failure = new WorkerStoppedError(`lease failed for good (failFast): ${why}`, code, err);
          this.#onError(this.#failure, "lease");
          this.#stopping.abort();
          break;
        }
        this.#onError(err, "lease");
        await sleep(backoffMs(failures), stop);
        failures++;
      }
    }
  }

  #start(task: LeasedTask): void {
    const ctx = new TaskContext(this.#broker, task, this.#leaseDurationMs, this.#serializer);
    let deadlineTimer: NodeJS.Timeout | undefined;
    if (task.deadline) {
      const ms = Math.max(timestampDate(task.deadline).getTime() - Date.now(), 0);
      deadlineTimer = setTimeout(() => ctx.abort("deadline"), ms);
    }
    if (this.#stopTimedOut) {
      ctx.abort("stopping");
    }
    const entry: Running = {
      ctx,
      done: Promise.resolve(),
      returned: false,
      lost: false,
      handedBack: false,
      stopWatch: () => {},
      startedAt: performance.now(),
    };
    const done = this.#execute(entry)
      .catch((err: unknown) => {
        this.#onError(err, `task ${ctx.taskId}`);
        return [] as LeasedTask[];
      })
      .then((next) => {
        clearTimeout(deadlineTimer);
        // In one step: the finished task leaves and the tasks its settle leased take its
        // slot, so the lease loop never sees the slot free in between. Delete first: a
        // failed task retried at once can come back with the same id.
        if (this.#running.get(task.taskId) === entry) this.#running.delete(task.taskId);
        for (const t of next) {
          this.#leaseNextTasks++;
          this.#start(t);
        }
        this.#slotFreed?.();
      });
    entry.done = done;
    this.#running.set(task.taskId, entry);
  }

  /** The lease_next a settle carries: the freed slot's task, no wait; none when off or stopping. */
  #nextLease() {
    if (!this.#leaseNext || this.#stopping.signal.aborted) {
      return undefined;
    }
    // The settling task's handler has returned: its slot counts as free.
    const { queues, maxTasks } = this.#leasePlan(1);
    if (maxTasks <= 0) return undefined;
    return {
      workerId: this.workerId,
      queues,
      maxTasks: 1,
      leaseDuration: durationFromMs(this.#leaseDurationMs),
      labels: { ...this.labels },
    };
  }

  /** Cancels the handler (kind "lost") and logs it once: nothing more is sent for the task. */
  #markLost(entry: Running, why: string): void {
    if (!entry.lost && !entry.handedBack) {
      entry.lost = true;
      this.#metrics.leaseLost(entry.ctx.queue);
      this.#log.warn(`taskbroker worker: task ${entry.ctx.taskId}: lease lost (${why}); not settled by this worker`);
    }
    entry.ctx.abort("lost");
  }

  /** Runs the handler (and middleware) and settles the task; resolves with the tasks the settle leased. */
  async #execute(entry: Running): Promise<LeasedTask[]> {
    const ctx = entry.ctx;
    let outcome: Outcome;
    const stopWatch = watchExpiry(entry, (e, why) => this.#markLost(e, why));
    entry.stopWatch = stopWatch;
    try {
      const value: unknown = await inProcessSpan(ctx.task, ctx.traceContext, this.#metrics, (cx) => {
        ctx.traceContext = cx;
        return this.#call(ctx);
      });
      const route = this.#routes.get(ctx.queue);
      const result = route ? route.encode(value) : new Error(`no handler for queue ${ctx.queue}`);
      outcome = result instanceof Uint8Array ? { ok: true, result, value } : { ok: false, error: result, thrown: false };
    } catch (error) {
      outcome = { ok: false, error: classify(this.#policies.get(ctx.queue), error), thrown: true };
    } finally {
      stopWatch();
      entry.returned = true;
    }
    const seconds = (performance.now() - entry.startedAt) / 1000;
    if (entry.handedBack) {
      return []; // handed back at stop (and counted there); another worker may run it now
    }
    if (entry.lost || ctx.abortKind === "lost") {
      if (!entry.lost) this.#markLost(entry, "a checkpoint answered LEASE_LOST");
      this.#metrics.task(ctx.queue, "lease_lost", seconds);
      return []; // Another holder may have the task now; nothing of ours would be accepted.
    }
    return settle(this.#settler, ctx, outcome, seconds);
  }

  /** The middleware chain around the queue's handler. */
  #call(ctx: TaskContext): Promise<unknown> {
    const route = this.#routes.get(ctx.queue);
    const run = route ? (c: TaskContext) => route.run(c) : () => Promise.reject(new Error(`no handler for queue ${ctx.queue}`));
    return withMiddleware(this.#middleware, run)(ctx);
  }

  #emit<E extends keyof WorkerEvents>(event: E, ...args: Parameters<WorkerEvents<Result>[E]>): void {
    for (const listener of this.#listeners[event]) {
      try {
        (listener as (...a: unknown[]) => void)(...args);
      } catch (err) {
        this.#onError(err, `${event} listener`);
      }
    }
  }

  #heartbeatLoop(): Promise<void> {
    return heartbeatLoop({
      broker: this.#broker,
      workerId: this.workerId,
      leaseDurationMs: this.#leaseDurationMs,
      intervalMs: this.#heartbeatIntervalMs,
      signal: this.#heartbeatStop.signal,
      running: () => this.#running.values(),
      markLost: (entry, why) => this.#markLost(entry, why),
      onError: (err, during) => this.#onError(err, during),
    });
  }
}
