/**
 * The worker's metrics through the OpenTelemetry metrics API (the meter named `taskbroker`).
 * `@opentelemetry/api` is an optional peer dependency: without it, or without an SDK installed
 * by the application, every instrument is a no-op.
 *
 * | instrument | kind | attributes |
 * |---|---|---|
 * | `taskbroker.worker.tasks` | counter | `queue`, `outcome` (succeeded, failed, lease_lost, cancelled) |
 * | `taskbroker.worker.task.duration` | histogram, seconds | `queue`, `outcome` |
 * | `taskbroker.worker.leases.lost` | counter | `queue` |
 * | `taskbroker.worker.settle.retries` | counter | `queue` |
 * | `taskbroker.worker.settle.calls` | counter | `rpc` (Complete, CompleteMany, Fail) |
 * | `messaging.client.consumed.messages` | counter | the messaging attributes below |
 * | `messaging.process.duration` | histogram, seconds | the messaging attributes, `error.type` when the handler threw |
 * | `messaging.client.sent.messages` | counter | the messaging attributes, `error.type` when Submit failed |
 *
 * The `messaging.*` instruments follow the OpenTelemetry messaging semantic conventions:
 * `messaging.system` (taskbroker), `messaging.destination.name` (the queue) and
 * `messaging.operation.name` (submit, process). The worker's come from its meter provider;
 * `messaging.client.sent.messages` (counted by every Submit) from the global one.
 */
import { createRequire } from "node:module";
import type * as OtelApi from "@opentelemetry/api";
import { Code, ConnectError } from "@connectrpc/connect";

/** How a task's attempt ended, as the worker saw it. */
export type TaskOutcome = "succeeded" | "failed" | "lease_lost" | "cancelled";

/** The settle calls the worker makes. */
export type SettleRpc = "Complete" | "CompleteMany" | "Fail";

/**
 * An OpenTelemetry `MeterProvider` (the same shape), declared here so this package's types do
 * not need the optional `@opentelemetry/api` installed.
 */
export interface MeterProviderLike {
  getMeter(name: string, version?: string): unknown;
}

const otel: typeof OtelApi | undefined = (() => {
  try {
    return createRequire(import.meta.url)("@opentelemetry/api") as typeof OtelApi;
  } catch {
    return undefined;
  }
})();

/** The worker's instruments; each method records one event. */
export class WorkerMetrics {
  readonly #tasks: OtelApi.Counter | undefined;
  readonly #duration: OtelApi.Histogram | undefined;
  readonly #leasesLost: OtelApi.Counter | undefined;
  readonly #settleRetries: OtelApi.Counter | undefined;
  readonly #settleCalls: OtelApi.Counter | undefined;
  readonly #consumed: OtelApi.Counter | undefined;
  readonly #process: OtelApi.Histogram | undefined;

  /** From `provider`, else the global meter provider (read now: install the SDK before making workers). */
  constructor(provider?: MeterProviderLike) {
    const meter = (provider?.getMeter("taskbroker") ?? otel?.metrics.getMeter("taskbroker")) as OtelApi.Meter | undefined;
    if (!meter) return;
    this.#tasks = meter.createCounter("taskbroker.worker.tasks", { description: "Task attempts the worker finished, by outcome" });
    this.#duration = meter.createHistogram("taskbroker.worker.task.duration", {
      description: "Time from a task's start on the worker until its handler returned",
      unit: "s",
    });
    this.#leasesLost = meter.createCounter("taskbroker.worker.leases.lost", { description: "Leases the worker lost while it held them" });
    this.#settleRetries = meter.createCounter("taskbroker.worker.settle.retries", {
      description: "Complete or Fail calls sent again after the broker was unreachable",
    });
    this.#settleCalls = meter.createCounter("taskbroker.worker.settle.calls", { description: "Settle calls sent, by RPC" });
    this.#consumed = meter.createCounter("messaging.client.consumed.messages", {
      description: "Leased tasks given to a handler",
      unit: "{message}",
    });
    this.#process = meter.createHistogram("messaging.process.duration", {
      description: "How long handlers ran (messaging conventions)",
      unit: "s",
    });
  }

  task(queue: string, outcome: TaskOutcome, seconds: number): void {
    this.#tasks?.add(1, { queue, outcome });
    this.#duration?.record(seconds, { queue, outcome });
  }

  leaseLost(queue: string): void {
    this.#leasesLost?.add(1, { queue });
  }

  settleRetry(queue: string): void {
    this.#settleRetries?.add(1, { queue });
  }

  settleCall(rpc: SettleRpc): void {
    this.#settleCalls?.add(1, { rpc });
  }

  /** A leased task given to its handler. */
  consumed(queue: string): void {
    this.#consumed?.add(1, messagingAttributes(queue, "process"));
  }

  /** A handler's run; `failure` when it threw. */
  processed(queue: string, seconds: number, failure?: { error: unknown }): void {
    this.#process?.record(seconds, messagingAttributes(queue, "process", failure));
  }
}

/** The messaging.system of every span and instrument. */
export const MESSAGING_SYSTEM = "taskbroker";

/** The attributes of the `messaging.*` instruments; `error.type` only with a failure. */
function messagingAttributes(queue: string, operation: string, failure?: { error: unknown }): OtelApi.Attributes {
  const attrs: OtelApi.Attributes = {
    "messaging.system": MESSAGING_SYSTEM,
    "messaging.destination.name": queue,
    "messaging.operation.name": operation,
  };
  if (failure) attrs["error.type"] = errorType(failure.error);
  return attrs;
}

/**
 * The `error.type` of a failure: a ConnectError's gRPC code (`UNAVAILABLE`), else the error's
 * class (`PermanentError`, `TypeError`), else `_OTHER`.
 */
export function errorType(error: unknown): string {
  if (error instanceof ConnectError) return Code[error.code].replace(/(?<=.)([A-Z])/g, "_$1").toUpperCase();
  const name = (error as { constructor?: { name?: unknown } } | null)?.constructor?.name;
  return error instanceof Error && typeof name === "string" && name ? name : "_OTHER";
}

// The counter of the global meter provider it came from: the API's global is no proxy, so it
// is made again when the application installs (or replaces) the provider.
let sent: { provider: unknown; counter: OtelApi.Counter } | undefined;

/** Counts a Submit's tasks in `messaging.client.sent.messages` (global meter provider), by queue. */
export function sentMessages(tasks: readonly { queue?: string }[], failure: { error: unknown } | undefined): void {
  if (!otel) return;
  const provider = otel.metrics.getMeterProvider();
  if (sent?.provider !== provider) {
    const counter = provider.getMeter("taskbroker").createCounter("messaging.client.sent.messages", {
      description: "Tasks sent in Submit calls",
      unit: "{message}",
    });
    sent = { provider, counter };
  }
  const byQueue = new Map<string, number>();
  for (const t of tasks) byQueue.set(t.queue ?? "", (byQueue.get(t.queue ?? "") ?? 0) + 1);
  for (const [queue, n] of byQueue) {
    sent.counter.add(n, messagingAttributes(queue, "submit", failure));
  }
}
