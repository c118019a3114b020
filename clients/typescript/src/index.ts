/**
 * taskbroker client for TypeScript: generated messages and services (gen/), a connection
 * helper with rich-error decoding (client.ts), a worker runtime (worker.ts, context.ts) and
 * waiting for tasks on the WatchTasks stream (wait.ts).
 */
export { connect, optionsFromEnv, errorInfo, isLeaseLost, ERROR_DOMAIN, REASON_LEASE_LOST } from "./client.js";
export type { Taskbroker, BrokerClient, AdminClient, ScheduleClient, ConnectOptions, TlsOptions } from "./client.js";
export { Worker } from "./worker.js";
export type { Handler, WorkerOptions, RunOptions, Logger } from "./worker.js";
export { DEFAULTS, backoffMs, backoffCeilingMs, heartbeatIntervalMs, stopsWorker, STOP_CODES } from "./spec.js";
export { TRACEPARENT, currentTraceparent } from "./tracing.js";
export { TaskContext } from "./context.js";
export type { BytesLike } from "./context.js";
export { TaskbrokerError, RetryableError, PermanentError, TaskAbortedError, WorkerStoppedError } from "./errors.js";
export type { AbortKind } from "./errors.js";
export { target, sticky, fanout, MAX_LABELS } from "./routing.js";
export * from "./gen/taskbroker/v1/broker_pb.js";
export * from "./gen/taskbroker/v1/admin_pb.js";
export * from "./gen/taskbroker/v1/schedule_pb.js";
export * from "./gen/taskbroker/v1/event_pb.js";
export { wait, waitAll, submitAndWait, isFinal, WaitTimeoutError, MAX_WAIT_TASKS } from "./wait.js";
export type { WaitOptions } from "./wait.js";
// The worker registry's messages; its Worker message is WorkerInfo here (Worker is the runtime).
export {
  WorkerSchema as WorkerInfoSchema,
  ListWorkersRequestSchema,
  ListWorkersResponseSchema,
  GetWorkerRequestSchema,
  GetWorkerResponseSchema,
  WorkerLeaseSchema,
} from "./gen/taskbroker/v1/worker_pb.js";
export type {
  Worker as WorkerInfo,
  ListWorkersRequest,
  ListWorkersResponse,
  GetWorkerRequest,
  GetWorkerResponse,
  WorkerLease,
} from "./gen/taskbroker/v1/worker_pb.js";
export { ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";
export type { ErrorInfo } from "./gen/google/rpc/error_details_pb.js";
