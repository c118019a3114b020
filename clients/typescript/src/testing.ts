/**
 * Testing handlers and producers without a broker (exported as `testing`).
 *
 * - `TestContext`: the `TaskContext` a handler receives, built from a queue and a payload (and
 *   whatever else the test sets: attempt, metadata, the checkpoint an earlier attempt saved),
 *   which records what the handler did: `checkpoints`, `cancelChecks` and, through `run`, its
 *   `Outcome` as the worker would report it.
 * - `FakeClient`: the `Client` calls (`submit`, `submitMany`, `getResult`, and `broker` /
 *   `admin` for `wait`, `waitAll`, `submitAndWait`) and a worker's handlers in one object: a
 *   submit runs the task's handler in-process at once, attempt after attempt as the broker
 *   would, so the task is finished when `submit` resolves.
 *
 *     const out = await new testing.TestContext("emails", { to: "ada@example.com" }).run(sendEmail);
 *     assert.ok(out.ok && out.value.sent);
 */
import { clone, create } from "@bufbuild/protobuf";
import { durationMs, timestampFromMs, timestampNow } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { LeasedTaskSchema, TaskState, type LeasedTask, type SubmitResult, SubmitResultSchema, TaskSpecSchema } from "./gen/taskbroker/v1/broker_pb.js";
import { TaskSchema, type Task } from "./gen/taskbroker/v1/admin_pb.js";
import { CancelReason } from "./gen/taskbroker/v1/event_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Transport } from "@connectrpc/connect";
import type { AdminClient, BrokerClient, ScheduleClient, SubmitOptions, Taskbroker } from "./client.js";
import { taskSpec } from "./client.js";
import { TaskContext, toBytes, type BytesLike } from "./context.js";
import { RetryableError, TaskbrokerError, throwIfFailed, type AbortKind, type RequestedCooldown } from "./errors.js";
import { rawRoute, typedRoute, withMiddleware, type AnyHandler, type Handler, type Middleware, type Route } from "./handlers.js";
import { decodeResult, json, payloadBytes, type Serializer } from "./serializer.js";
import { failRequest } from "./worker.js";

/** The attempts a task gets when its retry policy sets none (the broker's default). */
export const DEFAULT_MAX_ATTEMPTS = 3;
const LEASE_MS = 30_000;

let nextId = 0;
const newId = (): string => `test-task-${++nextId}`;

/** The fields of the task a `TestContext` hands the handler. */
export interface TestTaskOptions {
  taskId?: string;
  key?: string;
  /** 1-based; default 1. */
  attempt?: number;
  /** Default 3. */
  maxAttempts?: number;
  metadata?: Record<string, string>;
  /** The checkpoint an earlier attempt saved: `lastCheckpoint` returns it. */
  checkpoint?: BytesLike;
  dependencyResults?: Record<string, Uint8Array>;
  /** The task's deadline. */
  deadline?: Date;
  atMostOnce?: boolean;
  fencingToken?: bigint;
  /** Decodes the payload for typed handlers, encodes a payload that is not bytes; default JSON. */
  serializer?: Serializer;
  /** The n-th checkpoint's answer (1-based) says an operator cancelled the task (`abortKind` "cancelled"). */
  cancelAtCheckpoint?: number;
  /** The n-th checkpoint (1-based) finds the lease lost: it throws, and `abortKind` is "lost". */
  loseLeaseAtCheckpoint?: number;
}

/** The LeasedTask a worker would get for a task of `queue` carrying `payload` (not bytes: encoded by the serializer). */
export function leasedTask(queue: string, payload: unknown = new Uint8Array(), options: TestTaskOptions = {}): LeasedTask {
  const serializer = options.serializer ?? json;
  const checkpoint = options.checkpoint === undefined ? undefined : toBytes(options.checkpoint);
  return create(LeasedTaskSchema, {
    taskId: options.taskId ?? newId(),
    queue,
    payload: typeof payload === "string" ? toBytes(payload) : payloadBytes(serializer, payload),
    key: options.key ?? "",
    attempt: options.attempt ?? 1,
    maxAttempts: options.atMostOnce ? 1 : (options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS),
    metadata: { ...(options.metadata ?? {}) },
    leaseToken: "test-lease",
    fencingToken: options.fencingToken ?? 1n,
    leaseExpiresAt: timestampFromMs(Date.now() + LEASE_MS),
    createdAt: timestampNow(),
    dependencyResults: { ...(options.dependencyResults ?? {}) },
    atMostOnce: options.atMostOnce ?? false,
    ...(checkpoint === undefined ? {} : { checkpoint, hasCheckpoint: true }),
    ...(options.deadline === undefined ? {} : { deadline: timestampFromMs(options.deadline.getTime()) }),
  });
}

/** How one attempt ended, as the worker reports it: Complete with `result`, or Fail. */
export type Outcome<Result = unknown> =
  | { ok: true; result: Uint8Array; value: Result; leaseLost: boolean }
  | {
      ok: false;
      /** What the handler threw (or the error of a result that cannot be encoded). */
      error: unknown;
      /** The Fail's error_message: the task's last_error. */
      errorMessage: string;
      /** False for a PermanentError (and a payload that does not decode). */
      retryable: boolean;
      permanent: boolean;
      /** What `RetryableError`'s retryAfterMs asked for (0 after a stop: handed back). */
      retryAfterMs: number | undefined;
      preferSameWorker: boolean;
      /** What `RetryableError`'s coolDownKeyMs or coolDownBucketMs asked for (FailRequest.cooldown). */
      cooldown: RequestedCooldown | undefined;
      /** The lease was lost during the attempt: the worker reports nothing then. */
      leaseLost: boolean;
    };

/**
 * A `TaskContext` no broker leased: `checkpoint` is recorded (and answered as `cancelAtCheckpoint`
 * and `loseLeaseAtCheckpoint` say), `cancel(kind)` fires the signal as the worker does. Heartbeats
 * are the worker's, not the handler's: there are none to record.
 */
export class TestContext extends TaskContext {
  /** The checkpoints the handler saved, in order. */
  readonly checkpoints: Uint8Array[];
  #checks = 0;
  #quiet = 0;
  #outcome: Outcome | undefined;
  readonly #options: TestTaskOptions;
  readonly #ser: Serializer;

  constructor(queue: string, payload?: unknown, options?: TestTaskOptions);
  constructor(task: LeasedTask, options?: TestTaskOptions);
  constructor(queueOrTask: string | LeasedTask, payloadOrOptions?: unknown, maybeOptions?: TestTaskOptions) {
    const given = typeof queueOrTask !== "string";
    const options: TestTaskOptions = (given ? (payloadOrOptions as TestTaskOptions | undefined) : maybeOptions) ?? {};
    const task = given ? queueOrTask : leasedTask(queueOrTask, payloadOrOptions, options);
    const calls: Uint8Array[] = [];
    const broker = {
      checkpoint: async (req: { checkpoint: Uint8Array }) => {
        calls.push(req.checkpoint);
        const at = options.cancelAtCheckpoint;
        return { leaseExpiresAt: timestampFromMs(Date.now() + LEASE_MS), cancelRequested: at !== undefined && calls.length >= at };
      },
    } as unknown as BrokerClient;
    super(broker, task, LEASE_MS, options.serializer ?? json);
    this.checkpoints = calls;
    this.#options = options;
    this.#ser = options.serializer ?? json;
    // Count the handler's looks at the signal; the context's own reads are not counted.
    const signal = this.signal;
    const proto = Object.getPrototypeOf(signal) as AbortSignal;
    const aborted = Object.getOwnPropertyDescriptor(AbortSignal.prototype, "aborted")!.get!;
    Object.defineProperty(signal, "aborted", {
      get: () => {
        if (this.#quiet === 0) this.#checks++;
        return aborted.call(signal) as boolean;
      },
    });
    Object.defineProperty(signal, "throwIfAborted", {
      value: () => {
        this.#checks++;
        proto.throwIfAborted.call(signal);
      },
    });
    if (task.deadline) {
      const ms = Number(task.deadline.seconds) * 1000 + task.deadline.nanos / 1e6 - Date.now();
      const timer = setTimeout(() => this.abort("deadline"), Math.max(0, ms));
      timer.unref();
    }
  }

  /** How many times the handler read `signal.aborted` or called `signal.throwIfAborted()`. */
  get cancelChecks(): number {
    return this.#checks;
  }

  /** The outcome of the last `run`. */
  get outcome(): Outcome | undefined {
    return this.#outcome;
  }

  override get abortKind(): AbortKind | undefined {
    this.#quiet++;
    try {
      return super.abortKind;
    } finally {
      this.#quiet--;
    }
  }

  override abort(kind: AbortKind): void {
    this.#quiet++;
    try {
      super.abort(kind);
    } finally {
      this.#quiet--;
    }
  }

  override async checkpoint(data: BytesLike): Promise<void> {
    const at = this.#options.loseLeaseAtCheckpoint;
    if (at !== undefined && this.checkpoints.length + 1 >= at) {
      this.abort("lost");
      throw this.signal.reason;
    }
    return super.checkpoint(data);
  }

  /** Fires the signal as the worker does: "cancelled" (an operator), "lost", "stopping", "deadline". */
  cancel(kind: AbortKind = "cancelled"): void {
    this.abort(kind);
  }

  /**
   * Runs a typed handler (`(data, ctx) => result`, or a `handler()` definition) as a worker's
   * `handlers` entry runs: the payload decoded, the result encoded, inside `middleware`.
   * Resolves with the outcome; never rejects for the handler's error.
   */
  run<Data = unknown, Result = unknown>(
    fn: ((data: Data, ctx: TaskContext) => Result | Promise<Result>) | AnyHandler,
    options: { middleware?: Middleware[] } = {},
  ): Promise<Outcome<Awaited<Result>>> {
    return this.runRoute(typedRoute(this.queue, fn as AnyHandler, this.#ser), options.middleware) as Promise<Outcome<Awaited<Result>>>;
  }

  /** Runs a raw handler (`(ctx) => bytes | string | void`), as the worker's `handler` option with `queues`. */
  runRaw(fn: Handler, options: { middleware?: Middleware[] } = {}): Promise<Outcome<BytesLike | void>> {
    return this.runRoute(rawRoute(fn), options.middleware) as Promise<Outcome<BytesLike | void>>;
  }

  /** @internal */
  async runRoute(route: Route, middleware: Middleware[] = []): Promise<Outcome> {
    let outcome: Outcome;
    try {
      const value = await withMiddleware(middleware, (c) => route.run(c))(this);
      const result = route.encode(value);
      outcome = result instanceof Uint8Array ? { ok: true, result, value, leaseLost: this.abortKind === "lost" } : this.#failed(result);
    } catch (error) {
      outcome = this.#failed(error);
    }
    this.#outcome = outcome;
    return outcome;
  }

  #failed(error: unknown): Outcome {
    const req = failRequest(this, error);
    const stopping = this.abortKind === "stopping";
    return {
      ok: false,
      error,
      errorMessage: req.errorMessage,
      retryable: stopping || !req.nonRetryable,
      permanent: !stopping && req.nonRetryable,
      retryAfterMs: stopping ? 0 : req.retryAfter === undefined ? undefined : durationMs(req.retryAfter),
      preferSameWorker: req.preferSameWorker,
      cooldown: error instanceof RetryableError ? error.cooldown : undefined,
      leaseLost: this.abortKind === "lost",
    };
  }
}

interface Stored {
  task: Task;
  outcomes: Outcome[];
}

/** What a FakeClient runs: a worker's `handlers`, `middleware` and `serializer`. */
export interface FakeClientOptions {
  handlers?: Record<string, AnyHandler>;
  middleware?: Middleware[];
  /** Encodes `submit` payloads, decodes payloads and results; default JSON. */
  serializer?: Serializer;
}

/**
 * An in-process stand-in for a broker and a worker together, with the calls of a `Client`. A
 * submit runs the queue's handler at once, retrying as the broker would (up to maxAttempts, 3 by
 * default, 1 for atMostOnce; a PermanentError ends it; no backoff, runAt not waited for), so the
 * task is finished when `submit` resolves. A task of a queue with no handler stays READY
 * (`wait` runs until its timeout); `runPending()` runs it once one is registered. Keys
 * deduplicate as on the broker. `broker` and `admin` answer what `submitTasks`, `wait`,
 * `waitAll` and `submitAndWait` call (Submit, GetTask, WatchTasks); other RPCs are UNIMPLEMENTED.
 */
export class FakeClient implements Taskbroker {
  readonly serializer: Serializer;
  readonly broker: BrokerClient;
  readonly admin: AdminClient;
  /** Every call UNIMPLEMENTED. */
  readonly schedules: ScheduleClient;
  /** Every call UNIMPLEMENTED: the fake answers through `broker` and `admin` only. */
  readonly transport: Transport;
  readonly #routes = new Map<string, Route>();
  readonly #middleware: Middleware[];
  readonly #tasks = new Map<string, Stored>();

  constructor(options: FakeClientOptions = {}) {
    this.serializer = options.serializer ?? json;
    this.#middleware = [...(options.middleware ?? [])];
    for (const [q, h] of Object.entries(options.handlers ?? {})) this.handle(q, h);
    const unimplemented = (name: string) => () => Promise.reject(new ConnectError(`the fake broker has no ${name}`, Code.Unimplemented));
    const only = <T extends object>(impl: object): T =>
      new Proxy(impl, {
        // Not "then": the stub is no thenable (awaiting it must not call an RPC).
        get: (o, p) => (p in o ? (o as Record<string | symbol, unknown>)[p] : typeof p === "string" && p !== "then" ? unimplemented(p) : undefined),
      }) as T;
    this.schedules = only<ScheduleClient>({});
    this.transport = only<Transport>({});
    this.broker = only<BrokerClient>({ submit: (req: { tasks?: MessageInitShape<typeof TaskSpecSchema>[] }) => this.#submit(req) });
    this.admin = only<AdminClient>({
      getTask: async (req: { taskId: string }) => {
        const s = this.#tasks.get(req.taskId);
        if (!s) throw new ConnectError(`task ${req.taskId} not found`, Code.NotFound);
        return { task: structuredCloneTask(s.task) };
      },
      watchTasks: (_req: unknown, opts: { signal?: AbortSignal; timeoutMs?: number; onHeader?: (h: Headers) => void } = {}) => silentStream(opts),
    });
  }

  /** Registers a typed handler for `queue`, as a worker's `handlers` entry. */
  handle(queue: string, fn: AnyHandler): void {
    this.#routes.set(queue, typedRoute(queue, fn, this.serializer));
  }

  /** Registers a raw handler (bytes in, bytes out) for `queue`. */
  handleRaw(queue: string, fn: Handler): void {
    this.#routes.set(queue, rawRoute(fn));
  }

  /** Adds middleware around every handler, the first outermost. */
  use(mw: Middleware): void {
    this.#middleware.push(mw);
  }

  /** As `Client.submit`: the task has run when it resolves. */
  async submit<Data = unknown>(queue: string, data: Data, options: SubmitOptions = {}): Promise<SubmitResult> {
    const [result] = await this.submitMany<Data>(queue, [data], options);
    return result!;
  }

  /** As `Client.submitMany`. */
  async submitMany<Data = unknown>(queue: string, items: readonly Data[], options: SubmitOptions = {}): Promise<SubmitResult[]> {
    const tasks = items.map((d) => taskSpec(queue, payloadBytes(this.serializer, d), options));
    return (await this.broker.submit({ tasks })).results;
  }

  /** As `Client.getResult`: TaskFailedError for DEAD or CANCELLED, TaskbrokerError when not finished. */
  async getResult<Result = unknown>(taskId: string): Promise<Result> {
    const task = this.task(taskId);
    if (!task) throw new TaskbrokerError(`task ${taskId} is missing, not SUCCEEDED: it has no result`);
    throwIfFailed(task);
    if (task.state !== TaskState.SUCCEEDED) throw new TaskbrokerError(`task ${taskId} is ${TaskState[task.state]}, not SUCCEEDED: it has no result`);
    return decodeResult<Result>(task.result, this.serializer);
  }

  /** The task as the fake holds it. */
  task(taskId: string): Task | undefined {
    const s = this.#tasks.get(taskId);
    return s && structuredCloneTask(s.task);
  }

  /** Every task submitted, in order. */
  get tasks(): Task[] {
    return [...this.#tasks.values()].map((s) => structuredCloneTask(s.task));
  }

  /** The task's attempts' outcomes, in order. */
  outcomes(taskId: string): Outcome[] {
    return [...(this.#tasks.get(taskId)?.outcomes ?? [])];
  }

  /** Runs every READY task whose queue has a handler now; resolves with how many ran. */
  async runPending(): Promise<number> {
    const ready = [...this.#tasks.values()].filter((s) => s.task.state === TaskState.READY && this.#routes.has(s.task.queue));
    for (const s of ready) await this.#run(s);
    return ready.length;
  }

  async close(): Promise<void> {}

  async [Symbol.asyncDispose](): Promise<void> {}

  async #submit(req: { tasks?: MessageInitShape<typeof TaskSpecSchema>[] }) {
    const specs = (req.tasks ?? []).map((t) => create(TaskSpecSchema, t));
    if (specs.length === 0 || specs.length > 1000) throw new ConnectError(`a Submit carries 1 to 1000 tasks, not ${specs.length}`, Code.InvalidArgument);
    specs.forEach((s, i) => {
      if (!s.queue) throw new ConnectError(`tasks[${i}]: queue is required`, Code.InvalidArgument);
    });
    const results: SubmitResult[] = [];
    const created: Stored[] = [];
    for (const s of specs) {
      const existing = s.key ? [...this.#tasks.values()].find((t) => t.task.queue === s.queue && t.task.key === s.key) : undefined;
      if (existing) {
        results.push(create(SubmitResultSchema, { taskId: existing.task.id, deduplicated: true }));
        continue;
      }
      const maxAttempts = s.atMostOnce ? 1 : s.retry?.maxAttempts || DEFAULT_MAX_ATTEMPTS;
      const dependsOn = [...s.dependsOn, ...s.dependsOnIndex.map((i) => results[i]?.taskId ?? "")];
      const task = create(TaskSchema, {
        id: newId(), queue: s.queue, payload: s.payload, key: s.key, priority: s.priority, metadata: { ...s.metadata },
        state: TaskState.READY, maxAttempts, createdAt: timestampNow(), updatedAt: timestampNow(), concurrencyKey: s.concurrencyKey, bucket: s.bucket,
        dependsOn, runIfDependencyFails: s.runIfDependencyFails, atMostOnce: s.atMostOnce,
        ...(s.retry ? { retry: s.retry } : {}), ...(s.deadline ? { deadline: s.deadline } : {}),
      });
      const stored = { task, outcomes: [] };
      this.#tasks.set(task.id, stored);
      created.push(stored);
      results.push(create(SubmitResultSchema, { taskId: task.id }));
    }
    for (const s of created) await this.#run(s);
    return { results };
  }

  async #run(s: Stored): Promise<void> {
    const t = s.task;
    for (;;) {
      const route = this.#routes.get(t.queue);
      if (!route || t.state !== TaskState.READY) return;
      const deps: Record<string, Uint8Array> = {};
      for (const dep of t.dependsOn) {
        const d = this.#tasks.get(dep)?.task;
        if (d?.state === TaskState.SUCCEEDED) deps[dep] = d.result;
        else if (!t.runIfDependencyFails) {
          t.state = TaskState.CANCELLED;
          t.cancelReason = CancelReason.DEPENDENCY_FAILED;
          t.finishedAt = timestampNow();
          return;
        }
      }
      t.attempt += 1;
      const ctx = new TestContext(
        leasedTask(t.queue, t.payload, {
          taskId: t.id, key: t.key, attempt: t.attempt, maxAttempts: t.maxAttempts, metadata: t.metadata,
          dependencyResults: deps, atMostOnce: t.atMostOnce, fencingToken: BigInt(t.attempt),
          ...(t.hasCheckpoint ? { checkpoint: t.checkpoint } : {}),
        }),
        { serializer: this.serializer },
      );
      const out = await ctx.runRoute(route, this.#middleware);
      s.outcomes.push(out);
      if (ctx.lastCheckpoint !== undefined) {
        t.checkpoint = ctx.lastCheckpoint;
        t.hasCheckpoint = true;
      }
      t.updatedAt = timestampNow();
      if (out.ok) {
        t.state = TaskState.SUCCEEDED;
        t.result = out.result;
      } else {
        t.lastError = out.errorMessage;
        if (out.retryable && t.attempt < t.maxAttempts) continue;
        t.state = TaskState.DEAD;
      }
      t.finishedAt = timestampNow();
      return;
    }
  }
}

function structuredCloneTask(t: Task): Task {
  return clone(TaskSchema, t);
}

/** A WatchTasks stream that accepts the watch and sends nothing until its signal or timeout ends it. */
function silentStream(opts: { signal?: AbortSignal; timeoutMs?: number; onHeader?: (h: Headers) => void }): AsyncIterable<never> {
  queueMicrotask(() => opts.onHeader?.(new Headers()));
  return {
    [Symbol.asyncIterator]: () => ({
      next: () =>
        new Promise<IteratorResult<never>>((resolve) => {
          const end = () => resolve({ done: true, value: undefined });
          if (opts.signal?.aborted) return end();
          opts.signal?.addEventListener("abort", end, { once: true });
          if (opts.timeoutMs) setTimeout(end, opts.timeoutMs).unref();
        }),
    }),
  };
}
