/**
 * Connecting to a broker: one gRPC (HTTP/2; plaintext, TLS or mTLS) transport shared by the
 * two generated services, a bearer token on every call, and decoding of the broker's rich
 * error details.
 *
 * Owns no worker logic (see worker.ts) and no message types (see gen/).
 */
import { createClient, type Client, type Interceptor, type Transport, ConnectError, Code } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { readFileSync } from "node:fs";
import { BrokerService } from "./gen/taskbroker/v1/broker_pb.js";
import { AdminService } from "./gen/taskbroker/v1/admin_pb.js";
import { ScheduleService } from "./gen/taskbroker/v1/schedule_pb.js";
import { ErrorInfoSchema, type ErrorInfo } from "./gen/google/rpc/error_details_pb.js";
import type { SubmitRequest } from "./gen/taskbroker/v1/broker_pb.js";
import { currentTraceparent, TRACEPARENT } from "./tracing.js";
import { DEFAULTS } from "./spec.js";

/** The ErrorInfo domain of every error the broker raises. */
export const ERROR_DOMAIN = "taskbroker.dev";

/** The ErrorInfo reason when a lease token no longer holds its task. */
export const REASON_LEASE_LOST = "LEASE_LOST";

export type BrokerClient = Client<typeof BrokerService>;
export type AdminClient = Client<typeof AdminService>;
export type ScheduleClient = Client<typeof ScheduleService>;

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

/**
 * Connects to a broker. `address` is `host:port` (plaintext gRPC) or a full
 * `http://` / `https://` URL.
 */
export function connect(address: string, options: ConnectOptions = {}): Taskbroker {
  const tls = options.tls === true ? {} : options.tls || undefined;
  const scheme = tls === undefined ? "http" : "https";
  const baseUrl = /^https?:\/\//.test(address)
    ? address.replace(/^http:/, tls === undefined ? "http:" : "https:")
    : `${scheme}://${address}`;
  if (tls !== undefined && (tls.cert === undefined) !== (tls.key === undefined)) {
    throw new Error("tls: give both cert and key (mTLS), or neither");
  }
  const interceptors = [traceInterceptor, ...(options.interceptors ?? [])];
  if (options.token) {
    interceptors.unshift(bearer(options.token));
  }
  const transport = createGrpcTransport({
    baseUrl,
    interceptors,
    ...(tls === undefined
      ? {}
      : {
          nodeOptions: {
            ...(tls.ca === undefined ? {} : { ca: tls.ca }),
            ...(tls.cert === undefined ? {} : { cert: tls.cert }),
            ...(tls.key === undefined ? {} : { key: tls.key }),
            ...(tls.serverName === undefined ? {} : { servername: tls.serverName }),
          },
        }),
    pingIntervalMs: options.pingIntervalMs ?? 30_000,
    ...(options.defaultTimeoutMs === 0 ? {} : { defaultTimeoutMs: options.defaultTimeoutMs ?? DEFAULTS.callTimeoutMs }),
  });
  return {
    broker: createClient(BrokerService, transport),
    admin: createClient(AdminService, transport),
    schedules: createClient(ScheduleService, transport),
    transport,
  };
}

/**
 * Sends the active OpenTelemetry context as the `traceparent` header of every call and writes
 * it into the metadata of every submitted task that has none (spec point 7).
 */
const traceInterceptor: Interceptor = (next) => (req) => {
  const tp = currentTraceparent();
  if (tp) {
    req.header.set(TRACEPARENT, tp);
    if (req.method.name === "Submit" && !req.stream) {
      for (const task of (req.message as SubmitRequest).tasks) {
        task.metadata[TRACEPARENT] ??= tp;
      }
    }
  }
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
