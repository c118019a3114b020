/**
 * Connecting to a broker: one gRPC (HTTP/2, plaintext) transport shared by the two
 * generated services, and decoding of the broker's rich error details.
 *
 * Owns no worker logic (see worker.ts) and no message types (see gen/).
 */
import { createClient, type Client, type Interceptor, type Transport, ConnectError, Code } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { BrokerService } from "./gen/taskbroker/v1/broker_pb.js";
import { AdminService } from "./gen/taskbroker/v1/admin_pb.js";
import { ScheduleService } from "./gen/taskbroker/v1/schedule_pb.js";
import { ErrorInfoSchema, type ErrorInfo } from "./gen/google/rpc/error_details_pb.js";

/** The ErrorInfo domain of every error the broker raises. */
export const ERROR_DOMAIN = "taskbroker.dev";

/** The ErrorInfo reason when a lease token no longer holds its task. */
export const REASON_LEASE_LOST = "LEASE_LOST";

export type BrokerClient = Client<typeof BrokerService>;
export type AdminClient = Client<typeof AdminService>;
export type ScheduleClient = Client<typeof ScheduleService>;

export interface ConnectOptions {
  /** Extra Connect interceptors (auth headers, tracing), applied to every call. */
  interceptors?: Interceptor[];
  /** Sends an HTTP/2 PING after this much idleness, so dead connections are noticed. Default 30 s. */
  pingIntervalMs?: number;
  /** Deadline of every call that sets none itself, in ms. Default none. */
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
  const baseUrl = /^https?:\/\//.test(address) ? address : `http://${address}`;
  const transport = createGrpcTransport({
    baseUrl,
    interceptors: options.interceptors ?? [],
    pingIntervalMs: options.pingIntervalMs ?? 30_000,
    ...(options.defaultTimeoutMs === undefined ? {} : { defaultTimeoutMs: options.defaultTimeoutMs }),
  });
  return {
    broker: createClient(BrokerService, transport),
    admin: createClient(AdminService, transport),
    schedules: createClient(ScheduleService, transport),
    transport,
  };
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

/** True when the error says the lease is no longer held (status ABORTED, reason LEASE_LOST). */
export function isLeaseLost(err: unknown): boolean {
  if (!(err instanceof ConnectError) || err.code !== Code.Aborted) {
    return false;
  }
  const info = errorInfo(err);
  // An ABORTED without details is still a lost lease: it is the only ABORTED the broker raises
  // on settle calls, and treating it as lost only stops work that could not be settled anyway.
  return info === undefined || info.reason === REASON_LEASE_LOST;
}
