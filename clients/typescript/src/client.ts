/**
 * Connecting to a broker: one gRPC (HTTP/2; plaintext, TLS or mTLS) transport shared by the
 * two generated services, a bearer token on every call, and decoding of the broker's rich
 * error details.
 *
 * `Client` adds typed submits and results (a Serializer, JSON by default) and closing.
 *
 * Owns no worker logic (see worker.ts) and no message types (see gen/).
 */
import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  createClient,
  createContextKey,
  createContextValues,
  type Client as ServiceClient,
  type Interceptor,
  type Transport,
  ConnectError,
  Code,
} from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { timestampFromDate, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { readFileSync } from "node:fs";
import { BrokerService } from "./gen/taskbroker/v1/broker_pb.js";
import { AdminService } from "./gen/taskbroker/v1/admin_pb.js";
import { ScheduleService } from "./gen/taskbroker/v1/schedule_pb.js";
import { ErrorInfoSchema, type ErrorInfo } from "./gen/google/rpc/error_details_pb.js";
import { TaskState, type RetryPolicySchema, type SubmitRequest, type SubmitResponse, type SubmitResult, type TaskSpecSchema } from "./gen/taskbroker/v1/broker_pb.js";
import { applyRetryDefaults } from "./policy.js";
import { currentTraceparent, SendSpan, TRACEPARENT } from "./tracing.js";
import { DEFAULTS, submitRetryDelayMs } from "./spec.js";
import { decodeResult, json, payloadBytes, type Serializer } from "./serializer.js";
import { TaskbrokerError, throwIfFailed } from "./errors.js";
import * as ops from "./admin.js";
import type { TaskExplanation, TaskFilter, TaskInfo } from "./admin.js";
import * as buckets from "./buckets.js";
import type { BucketInfo, BucketUpdate, CooldownInfo, CooldownOf } from "./buckets.js";

/** The ErrorInfo domain of every error the broker raises. */
export const ERROR_DOMAIN = "taskbroker.dev";

/** The ErrorInfo reason when a lease token no longer holds its task. */
export const REASON_LEASE_LOST = "LEASE_LOST";

export type BrokerClient = ServiceClient<typeof BrokerService>;
export type AdminClient = ServiceClient<typeof AdminService>;
export type ScheduleClient = ServiceClient<typeof ScheduleService>;

/** TLS settings, PEM text or bytes. Giving any of them turns TLS on. */
export interface TlsOptions {
  /** CA certificate(s) to trust; default Node's bundled roots. */
  ca?: string | Buffer;
  /** Client certificate chain, for mTLS (with `key`). */
  cert?: string | Buffer;
  /** Client private key, for mTLS (with `cert`). */
  key?: string | Buffer;
  /** Server name to verify, when it differs from the address's host. */
  serverName?: string;
}

export interface ConnectOptions {
  /** Bearer token, sent as `authorization: Bearer TOKEN` on every call. */
  token?: string;
  /** TLS settings (`true`: TLS with Node's bundled roots). An `https://` address turns TLS on too. */
  tls?: TlsOptions | boolean;
  /** Extra Connect interceptors (tracing, ...), applied to every call. */
  interceptors?: Interceptor[];
  /** Sends an HTTP/2 PING after this much idleness, so dead connections are noticed. Default 30 s. */
  pingIntervalMs?: number;
  /**
   * Deadline of every call that sets none itself, in ms. Default 10 s (the spec's call
   * deadline); 0 for none.
   */
  defaultTimeoutMs?: number;
}

/** The services of one broker, sharing one HTTP/2 connection. */
export interface Taskbroker {
  broker: BrokerClient;
  admin: AdminClient;
  schedules: ScheduleClient;
  transport: Transport;
}

/** Connection options plus the serializer of typed payloads and results. */
export interface ClientOptions extends ConnectOptions {
  /** Encodes `submit()` payloads and decodes `getResult()` results; workers made from this client use it too. Default JSON. */
  serializer?: Serializer;
}

type TaskSpecInit = MessageInitShape<typeof TaskSpecSchema>;

/**
 * The fields of a task besides its queue and payload (priority, key, retry, ...), by name.
 * `runAt` and `deadline` take a `Date` (or a Timestamp); `delayMs` keeps the task SCHEDULED
 * for that many milliseconds from now.
 */
export type SubmitOptions = Omit<TaskSpecInit, "queue" | "payload" | "$typeName" | "runAt" | "deadline"> & {
  /** Keeps the task SCHEDULED until then. */
  runAt?: Date | TaskSpecInit["runAt"];
  /**
   * Keeps the task SCHEDULED for this many ms: its runAt is this machine's clock (`Date.now()`,
   * read when the TaskSpec is built) plus the delay; the broker compares runAt with its own
   * clock. Not with `runAt`.
   */
  delayMs?: number;
  /** The task is DEAD (DEADLINE_EXCEEDED) unless it finishes by then. */
  deadline?: Date | TaskSpecInit["deadline"];
};

/**
 * The TaskSpec of one task on `queue` with `payload` (bytes as they are sent) and `options`:
 * `Date`s become Timestamps and `delayMs` becomes runAt = `nowMs` + delayMs, `nowMs` being
 * `Date.now()` unless given. For `submitTasks`; `Client.submit` builds its tasks with it.
 */
export function taskSpec(queue: string, payload: Uint8Array, options: SubmitOptions = {}, nowMs: number = Date.now()): TaskSpecInit {
  const { runAt, delayMs, deadline, ...fields } = options;
  if (delayMs !== undefined && runAt !== undefined) {
    throw new RangeError("taskSpec: give runAt or delayMs, not both");
  }
  if (delayMs !== undefined && !Number.isFinite(delayMs)) {
    throw new RangeError(`taskSpec: delayMs must be a finite number of milliseconds, got ${delayMs}`);
  }
  const spec: TaskSpecInit = { ...fields, queue, payload };
  const when = delayMs !== undefined ? timestampFromMs(nowMs + delayMs) : runAt instanceof Date ? timestampFromDate(runAt) : runAt;
  if (when !== undefined) spec.runAt = when;
  const by = deadline instanceof Date ? timestampFromDate(deadline) : deadline;
  if (by !== undefined) spec.deadline = by;
  return spec;
}

/**
 * A connection to one broker: the generated services (`broker`, `admin`, `schedules`) on one
 * HTTP/2 connection, typed submits and results, and `close()` (or `await using`).
 *
 *     await using client = new Client("broker:50051", { token });
 *     const { taskId } = await client.submit<Email>("emails", { to: "ada@example.com" });
 */
export class Client implements Taskbroker {
  readonly broker: BrokerClient;
  /** Retry defaults by queue, declared with handlers (policy.ts): every submit fills them in. */
  readonly retryDefaults = new Map<string, MessageInitShape<typeof RetryPolicySchema>>();
  readonly admin: AdminClient;
  readonly schedules: ScheduleClient;
  readonly transport: Transport;
  readonly serializer: Serializer;
  readonly #sessions: Http2SessionManager;

  /**
   * `address` is `host:port` (plaintext gRPC) or a full `http://` / `https://` URL. Nothing is
   * sent until the first call.
   */
  constructor(address: string, options: ClientOptions = {}) {
    if (typeof address !== "string" || address.trim() === "") {
      throw new RangeError("Client: address is empty: give host:port or an http(s):// URL");
    }
    const tls = options.tls === true ? {} : options.tls || undefined;
    const scheme = tls === undefined ? "http" : "https";
    const baseUrl = /^https?:\/\//.test(address)
      ? address.replace(/^http:/, tls === undefined ? "http:" : "https:")
      : `${scheme}://${address}`;
    if (tls !== undefined && (tls.cert === undefined) !== (tls.key === undefined)) {
      throw new Error("tls: give both cert and key (mTLS), or neither");
    }
    const pingIntervalMs = options.pingIntervalMs ?? 30_000;
    if (!(pingIntervalMs > 0)) throw new RangeError(`Client: pingIntervalMs must be above 0, got ${pingIntervalMs}`);
    const timeoutMs = options.defaultTimeoutMs ?? DEFAULTS.callTimeoutMs;
    if (!(timeoutMs >= 0 && Number.isFinite(timeoutMs))) {
      throw new RangeError(`Client: defaultTimeoutMs must be 0 (none) or more, got ${timeoutMs}`);
    }
    const interceptors = [traceInterceptor, ...(options.interceptors ?? [])];
    if (options.token) {
      interceptors.unshift(bearer(options.token));
    }
    this.#sessions = new Http2SessionManager(
      baseUrl,
      { pingIntervalMs },
      tls === undefined
        ? {}
        : {
            ...(tls.ca === undefined ? {} : { ca: tls.ca }),
            ...(tls.cert === undefined ? {} : { cert: tls.cert }),
            ...(tls.key === undefined ? {} : { key: tls.key }),
            ...(tls.serverName === undefined ? {} : { servername: tls.serverName }),
          },
    );
    this.transport = createGrpcTransport({
      baseUrl,
      interceptors,
      sessionManager: this.#sessions,
      ...(timeoutMs === 0 ? {} : { defaultTimeoutMs: timeoutMs }),
    });
    this.broker = createClient(BrokerService, this.transport);
    this.admin = createClient(AdminService, this.transport);
    this.schedules = createClient(ScheduleService, this.transport);
    this.serializer = options.serializer ?? json;
  }

  /**
   * Submits one task whose payload is `data` encoded by the serializer (a `Uint8Array` is sent
   * as it is); resolves with its SubmitResult (`taskId`, `deduplicated`, `replaced`,
   * `copyTaskIds`). `options` takes every other TaskSpec field by name: `key`, `priority`,
   * `runAt` (a Date), `delayMs`, `deadline` (a Date), `retry`, `metadata`, `target`, `sticky`,
   * `fanout`, `concurrencyKey`, `bucket`, `checkpoint` (a Uint8Array, even empty: the checkpoint
   * the first attempt starts from), `dependsOn`, `dependsOnKeys`, `runIfDependencyFails`,
   * `onDuplicateKey`, `atMostOnce`.
   * Backpressure (RESOURCE_EXHAUSTED with a RetryInfo) is retried as `submitTasks` says.
   */
  async submit<Data = unknown>(queue: string, data: Data, options: SubmitOptions = {}): Promise<SubmitResult> {
    const [result] = await this.submitMany<Data>(queue, [data], options);
    return result!;
  }

  /** Submits one task per item, in one call (all or none); the results are in order. */
  async submitMany<Data = unknown>(queue: string, items: readonly Data[], options: SubmitOptions = {}): Promise<SubmitResult[]> {
    const now = Date.now();
    const tasks = items.map((data) => taskSpec(queue, payloadBytes(this.serializer, data), options, now));
    return submitTasks(this.broker, applyRetryDefaults(this.retryDefaults, tasks));
  }

  /**
   * The decoded result of a SUCCEEDED task (GetTask, then the serializer); rejects with a
   * TaskFailedError when the task ended DEAD or CANCELLED, and with a TaskbrokerError when it
   * has not finished yet or its result does not decode. To wait for it, see `wait()` and
   * `decodeResult()`.
   */
  async getResult<Result = unknown>(taskId: string): Promise<Result> {
    const { task } = await this.admin.getTask({ taskId });
    if (task) throwIfFailed(task);
    if (!task || task.state !== TaskState.SUCCEEDED) {
      const state = task ? TaskState[task.state] : "missing";
      throw new TaskbrokerError(`task ${taskId} is ${state}, not SUCCEEDED: it has no result`);
    }
    return decodeResult<Result>(task.result, this.serializer);
  }

  /** One task as the broker has it now, its state by name (`"SUCCEEDED"`), times as Dates. */
  getTask(taskId: string): Promise<TaskInfo> {
    return ops.getTask(this.admin, taskId);
  }

  /**
   * Every task matching `filter`, newest first, read a page at a time as the loop goes
   * (`for await (const t of client.listTasks({ queue: "emails", states: ["DEAD"] }))`);
   * leaving the loop stops reading.
   */
  listTasks(filter: TaskFilter = {}): AsyncGenerator<TaskInfo, void, undefined> {
    return ops.listTasks(this.admin, filter);
  }

  /** SCHEDULED, READY or BLOCKED: CANCELLED at once. LEASED: `cancelRequested`, and its worker is told. */
  cancelTask(taskId: string): Promise<TaskInfo> {
    return ops.cancelTask(this.admin, taskId);
  }

  /** DEAD or CANCELLED: READY again, with a fresh budget of attempts. */
  requeueTask(taskId: string): Promise<TaskInfo> {
    return ops.requeueTask(this.admin, taskId);
  }

  /** Which gates hold a task that is not running (`gates[i].kind`: `"RUN_AT_IN_FUTURE"`, `"NONE"`...). */
  explainTask(taskId: string): Promise<TaskExplanation> {
    return ops.explainTask(this.admin, taskId);
  }

  /** A limit bucket's settings, use now and cooldown; NOT_FOUND (a ConnectError) when it is not defined. */
  getBucket(name: string): Promise<BucketInfo> {
    return buckets.getBucket(this.admin, name);
  }

  /** Every defined bucket, by name. */
  listBuckets(): Promise<BucketInfo[]> {
    return buckets.listBuckets(this.admin);
  }

  /**
   * Changes the fields given (`{ rateLimit: { perSecond: 20, burst: 20 }, maxConcurrent: 50 }`),
   * defining the bucket if need be; resolves with the bucket as it is now.
   */
  updateBucket(name: string, update: BucketUpdate): Promise<BucketInfo> {
    return buckets.updateBucket(this.admin, name, update);
  }

  /** Removes a bucket (its tasks lease without its limits); NOT_FOUND when it is not defined. */
  deleteBucket(name: string): Promise<void> {
    return buckets.deleteBucket(this.admin, name);
  }

  /** The live cooldowns, soonest end first; of one queue's keys or one bucket when given. */
  listCooldowns(filter: { queue?: string; bucket?: string } = {}): Promise<CooldownInfo[]> {
    return buckets.listCooldowns(this.admin, filter);
  }

  /** Ends a cooldown now (`{ queue, key }` or `{ bucket }`); false when there was none. */
  liftCooldown(of: CooldownOf): Promise<boolean> {
    return buckets.liftCooldown(this.admin, of);
  }

  /** Closes the HTTP/2 connection; calls still running fail. A later call opens a new one. */
  async close(): Promise<void> {
    this.#sessions.abort();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/**
 * Sends `tasks` in one SubmitRequest (all or none) and resolves with their results in order.
 * A refusal for backpressure (a queue's max_pending: RESOURCE_EXHAUSTED with a RetryInfo) is
 * sent again after the hinted delay, at most 10 s each and 5 tries in all (`submitRetryDelayMs`); then
 * its error is thrown. `signal` ends a wait early.
 */
export async function submitTasks(
  broker: BrokerClient,
  tasks: MessageInitShape<typeof TaskSpecSchema>[],
  options: { signal?: AbortSignal } = {},
): Promise<SubmitResult[]> {
  // One send span around the resends; the interceptor stamps its context into each call.
  const send = new SendSpan(tasks);
  const contextValues = createContextValues().set(SEND_SPAN, send);
  try {
    for (let retries = 0; ; retries++) {
      try {
        const res = await broker.submit({ tasks }, options.signal ? { signal: options.signal, contextValues } : { contextValues });
        return send.sent(res.results);
      } catch (err) {
        const delay = submitRetryDelayMs(err, retries);
        if (delay === undefined) throw err;
        await new Promise<void>((resolve, reject) => {
          const timer = setTimeout(resolve, delay);
          options.signal?.addEventListener("abort", () => {
            clearTimeout(timer);
            reject(err);
          }, { once: true });
        });
      }
    }
  } catch (err) {
    send.failed(err);
    throw err;
  }
}

/**
 * Connects to a broker: `new Client(address, options)`. `address` is `host:port` (plaintext
 * gRPC) or a full `http://` / `https://` URL.
 */
export function connect(address: string, options: ClientOptions = {}): Client {
  return new Client(address, options);
}

/** The send span of a `submitTasks` call, for the interceptor. */
const SEND_SPAN = createContextKey<SendSpan | undefined>(undefined);

/**
 * Sends the active OpenTelemetry context as the `traceparent` header of every call (spec
 * point 7). A Submit runs in a send span (`submitTasks`'s, else one made here) whose context
 * is the header and goes into the metadata of every task that has no traceparent.
 */
const traceInterceptor: Interceptor = (next) => async (req) => {
  if (req.method.name === "Submit" && !req.stream) {
    const given = req.contextValues.get(SEND_SPAN);
    const send = given ?? new SendSpan((req.message as SubmitRequest).tasks);
    send.stamp((req.message as SubmitRequest).tasks);
    if (send.traceparent) req.header.set(TRACEPARENT, send.traceparent);
    if (given) return next(req);
    try {
      const res = await next(req);
      if (!res.stream) send.sent((res.message as SubmitResponse).results);
      return res;
    } catch (err) {
      send.failed(err);
      throw err;
    }
  }
  const tp = currentTraceparent();
  if (tp) req.header.set(TRACEPARENT, tp);
  return next(req);
};

/** An interceptor that sends the bearer token on every call. */
function bearer(token: string): Interceptor {
  return (next) => (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
}

/**
 * Options from the standard environment (docs/client-spec.md, point 8): `TASKBROKER_TOKEN`,
 * `TASKBROKER_CA` (turns TLS on), `TASKBROKER_CLIENT_CERT` and `TASKBROKER_CLIENT_KEY` (mTLS),
 * merged over `base`.
 */
export function optionsFromEnv(base: ConnectOptions = {}, env = process.env): ConnectOptions {
  const read = (name: string): Buffer | undefined => {
    const path = env[name];
    return path ? readFileSync(path) : undefined;
  };
  const ca = read("TASKBROKER_CA");
  const cert = read("TASKBROKER_CLIENT_CERT");
  const key = read("TASKBROKER_CLIENT_KEY");
  const out: ConnectOptions = { ...base };
  if (env["TASKBROKER_TOKEN"]) {
    out.token = env["TASKBROKER_TOKEN"];
  }
  if (ca || cert || key) {
    out.tls = {
      ...(ca === undefined ? {} : { ca }),
      ...(cert === undefined ? {} : { cert }),
      ...(key === undefined ? {} : { key }),
    };
  }
  return out;
}

/**
 * The google.rpc.ErrorInfo the broker attached to an error (from the
 * `grpc-status-details-bin` trailer), or undefined when there is none.
 */
export function errorInfo(err: unknown): ErrorInfo | undefined {
  if (!(err instanceof ConnectError)) {
    return undefined;
  }
  return err.findDetails(ErrorInfoSchema)[0];
}

/**
 * True when the error says the lease is no longer held: ABORTED with an ErrorInfo of domain
 * `taskbroker.dev` and reason `LEASE_LOST`. A bare ABORTED is not (docs/client-spec.md, point 2).
 */
export function isLeaseLost(err: unknown): boolean {
  if (!(err instanceof ConnectError) || err.code !== Code.Aborted) {
    return false;
  }
  const info = errorInfo(err);
  return info !== undefined && info.domain === ERROR_DOMAIN && info.reason === REASON_LEASE_LOST;
}
