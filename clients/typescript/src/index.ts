/**
 * taskbroker client for TypeScript: generated messages and services (gen/), a connection
 * helper with rich-error decoding (client.ts) and a worker runtime (worker.ts, context.ts).
 */
export { connect, optionsFromEnv, errorInfo, isLeaseLost, ERROR_DOMAIN, REASON_LEASE_LOST } from "./client.js";
export type { Taskbroker, BrokerClient, AdminClient, ConnectOptions, TlsOptions } from "./client.js";
export { Worker } from "./worker.js";
export type { Handler, WorkerOptions, RunOptions } from "./worker.js";
export { DEFAULTS, backoffMs, backoffCeilingMs, heartbeatIntervalMs, stopsWorker, STOP_CODES } from "./spec.js";
export { TRACEPARENT, currentTraceparent } from "./tracing.js";
export { TaskContext } from "./context.js";
export type { BytesLike } from "./context.js";
export { TaskbrokerError, RetryableError, PermanentError, TaskAbortedError, WorkerStoppedError } from "./errors.js";
export type { AbortKind } from "./errors.js";
export * from "./gen/taskbroker/v1/broker_pb.js";
export * from "./gen/taskbroker/v1/admin_pb.js";
export { ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";
export type { ErrorInfo } from "./gen/google/rpc/error_details_pb.js";
