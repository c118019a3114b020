/// <reference lib="dom" preserve="true" />
/**
 * taskbroker client for TypeScript: generated messages and services (gen/), a Client with typed
 * submits and rich-error decoding (client.ts, serializer.ts), a worker runtime with typed
 * handlers per queue, middleware, batched completions and metrics (worker.ts, handlers.ts,
 * completer.ts, metrics.ts, context.ts) and waiting for tasks on the WatchTasks stream (wait.ts).
 *
 * The reference to the DOM lib below is kept in the published index.d.ts: @connectrpc/connect's
 * declarations name the fetch type HeadersInit, which only the DOM lib declares (@types/node
 * binds Headers and RequestInit but not that type alias), so a Node project whose `lib` leaves
 * DOM out would otherwise need `skipLibCheck` to compile against this package.
 */
export { Client, connect, optionsFromEnv, errorInfo, isLeaseLost, submitTasks, taskSpec, ERROR_DOMAIN, REASON_LEASE_LOST } from "./client.js";
export type {
  Taskbroker,
  BrokerClient,
  AdminClient,
  ScheduleClient,
  ConnectOptions,
  ClientOptions,
  SubmitOptions,
  TlsOptions,
} from "./client.js";
export { Code, ConnectError } from "@connectrpc/connect";
// Times and durations of the messages (runAt, deadline, RetryPolicy backoffs, ...) from Dates and milliseconds.
export { timestampFromDate, timestampFromMs, timestampDate, timestampMs, durationFromMs, durationMs } from "@bufbuild/protobuf/wkt";
export type { Timestamp, Duration } from "@bufbuild/protobuf/wkt";
export { taskInfo } from "./admin.js";
export type { TaskInfo, TaskExplanation, TaskGate, TaskFilter, TaskStateName } from "./admin.js";
export { bucketInfo } from "./buckets.js";
export type { BucketInfo, BucketRateLimit, BucketUpdate, CooldownInfo, CooldownOf } from "./buckets.js";
export { Worker } from "./worker.js";
export type { WorkerOptions, WorkerEvents, RunOptions, Logger } from "./worker.js";
export { handler } from "./handlers.js";
export { defineTask } from "./policy.js";
export type { QueuePolicy, TaskDef } from "./policy.js";
export type { Handler, TypedHandler, HandlerDefinition, HandlerOptions, Middleware } from "./handlers.js";
export { json, decodeResult, SerializationError } from "./serializer.js";
export type { Serializer } from "./serializer.js";
export type { TaskOutcome, SettleRpc, MeterProviderLike } from "./metrics.js";
export { MAX_BATCH as MAX_COMPLETE_BATCH, MAX_BATCH_BYTES as MAX_COMPLETE_BATCH_BYTES } from "./completer.js";
export { DEFAULTS, backoffMs, backoffCeilingMs, heartbeatIntervalMs, stopsWorker, STOP_CODES, checkWorkerOptions, retryDelayMs, submitRetryDelayMs } from "./spec.js";
export { wrongForGood } from "./failfast.js";
export { TRACEPARENT, currentTraceparent } from "./tracing.js";
export { TaskContext } from "./context.js";
// Handlers and producers tested without a broker: testing.TestContext, testing.FakeClient.
export * as testing from "./testing.js";
export type { BytesLike } from "./context.js";
export { TaskbrokerError, RetryableError, PermanentError, TaskAbortedError, TaskFailedError, WorkerStoppedError } from "./errors.js";
export type { AbortKind, RequestedCooldown } from "./errors.js";
export { target, sticky, fanout, MAX_LABELS } from "./routing.js";
export * from "./gen/taskbroker/v1/broker_pb.js";
export * from "./gen/taskbroker/v1/admin_pb.js";
export * from "./gen/taskbroker/v1/schedule_pb.js";
export * from "./gen/taskbroker/v1/event_pb.js";
// The limit buckets' and cooldowns' messages (the rest of queue.proto is reached through `admin`).
export {
  LimitBucketSchema,
  BucketConfigSchema,
  BucketUseSchema,
  CooldownHoldSchema,
} from "./gen/taskbroker/v1/queue_pb.js";
export type { LimitBucket, BucketConfig, BucketUse, CooldownHold } from "./gen/taskbroker/v1/queue_pb.js";
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
export { ErrorInfoSchema, RetryInfoSchema, QuotaFailureSchema } from "./gen/google/rpc/error_details_pb.js";
export type { ErrorInfo, RetryInfo, QuotaFailure } from "./gen/google/rpc/error_details_pb.js";
