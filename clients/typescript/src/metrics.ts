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
 */
import { createRequire } from "node:module";
import type * as OtelApi from "@opentelemetry/api";

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
}
