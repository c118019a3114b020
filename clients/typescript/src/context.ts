/**
 * TaskContext: what a handler sees of one leased task (payload, attempt, checkpoint,
 * abort signal) and the per-task lease bookkeeping the worker's heartbeat loop updates.
 */
import { durationFromMs, timestampDate } from "@bufbuild/protobuf/wkt";
import type { LeasedTask } from "./gen/taskbroker/v1/broker_pb.js";
import { isLeaseLost, type BrokerClient } from "./client.js";
import { TaskAbortedError, type AbortKind } from "./errors.js";
import { taskContext, type TraceContext } from "./tracing.js";
import { DEFAULTS } from "./spec.js";
import { json, messageOf, SerializationError, type Serializer } from "./serializer.js";

const utf8 = new TextEncoder();

/** Bytes or a string (sent as UTF-8). */
export type BytesLike = Uint8Array | string;

export function toBytes(data: BytesLike): Uint8Array {
  return typeof data === "string" ? utf8.encode(data) : data;
}

export class TaskContext {
  /** The task as leased, unchanged. */
  readonly task: LeasedTask;
  /** Aborted when the lease is lost, the task is cancelled, its deadline passes or the worker stops hard. */
  readonly signal: AbortSignal;
  /**
   * The OpenTelemetry context of the task (undefined without `@opentelemetry/api`): in a
   * worker's handler, that of its `process` span, a child of the producer's span context from
   * the task's traceparent (before the run, and in the test fake, that span context). The
   * handler runs with it active.
   */
  traceContext: TraceContext | undefined;

  readonly #broker: BrokerClient;
  readonly #abort = new AbortController();
  #lastCheckpoint: Uint8Array | undefined;
  #leaseExpiresAtMs: number;
  readonly #extendByMs: number;
  readonly #serializer: Serializer;

  constructor(broker: BrokerClient, task: LeasedTask, extendByMs = 30_000, serializer: Serializer = json) {
    this.#broker = broker;
    this.#serializer = serializer;
    this.task = task;
    this.#extendByMs = extendByMs;
    this.traceContext = taskContext(task.metadata);
    this.signal = this.#abort.signal;
    this.#lastCheckpoint = task.hasCheckpoint ? task.checkpoint : undefined;
    this.#leaseExpiresAtMs = task.leaseExpiresAt
      ? timestampDate(task.leaseExpiresAt).getTime()
      : Date.now() + extendByMs;
  }

  get taskId(): string {
    return this.task.taskId;
  }

  /** The queue the task was leased from. */
  get queue(): string {
    return this.task.queue;
  }

  get payload(): Uint8Array {
    return this.task.payload;
  }

  /** 1-based number of this attempt. */
  get attempt(): number {
    return this.task.attempt;
  }

  /** Pass to downstream stores so they can reject writes from a stale holder. */
  get fencingToken(): bigint {
    return this.task.fencingToken;
  }

  /** The result of each SUCCEEDED dependency of this task (dependsOn, dependsOnIndex, dependsOnKeys), by task id. */
  get dependencyResults(): Readonly<Record<string, Uint8Array>> {
    return this.task.dependencyResults;
  }

  /**
   * One dependency's result decoded by the worker's serializer (JSON by default); the caller
   * names the type. Throws a SerializationError when `taskId` has no result here or it does
   * not decode.
   */
  dependencyResult<Result = unknown>(taskId: string): Result {
    const bytes = this.task.dependencyResults[taskId];
    if (bytes === undefined) {
      throw new SerializationError(`task ${this.task.taskId} has no result of a dependency ${taskId}`);
    }
    try {
      return this.#serializer.decode(bytes) as Result;
    } catch (err) {
      throw new SerializationError(`the result of dependency ${taskId} is not valid ${this.#serializer.name}: ${messageOf(err)}`, { cause: err });
    }
  }

  /** The latest checkpoint: saved by this attempt, else by an earlier one, else undefined. */
  get lastCheckpoint(): Uint8Array | undefined {
    return this.#lastCheckpoint;
  }

  /** When the lease runs out unless extended, as last reported by the broker. */
  get leaseExpiresAt(): Date {
    return new Date(this.#leaseExpiresAtMs);
  }

  /** Why the signal fired, when it did. */
  get abortKind(): AbortKind | undefined {
    const reason: unknown = this.signal.reason;
    return this.signal.aborted && reason instanceof TaskAbortedError ? reason.kind : undefined;
  }

  /**
   * Stores durable progress that the next attempt receives as `lastCheckpoint`, and extends
   * the lease by the worker's lease duration (spec point 3).
   * Throws the abort reason when the lease is already lost.
   */
  async checkpoint(data: BytesLike): Promise<void> {
    if (this.abortKind === "lost") {
      throw this.signal.reason;
    }
    const bytes = toBytes(data);
    try {
      const res = await this.#broker.checkpoint({
        taskId: this.task.taskId,
        leaseToken: this.task.leaseToken,
        checkpoint: bytes,
        extendBy: durationFromMs(this.#extendByMs),
      }, { timeoutMs: DEFAULTS.callTimeoutMs });
      this.#lastCheckpoint = bytes;
      if (res.leaseExpiresAt) {
        this.extendedTo(timestampDate(res.leaseExpiresAt).getTime());
      }
      if (res.cancelRequested) {
        this.abort("cancelled");
      }
    } catch (err) {
      if (isLeaseLost(err)) {
        this.abort("lost");
        throw this.signal.reason;
      }
      throw err;
    }
  }

  /** @internal The broker confirmed the lease until this time. */
  extendedTo(expiresAtMs: number): void {
    this.#leaseExpiresAtMs = expiresAtMs;
  }

  /** @internal Fires the signal once; later calls keep the first reason. */
  abort(kind: AbortKind): void {
    if (!this.signal.aborted) {
      this.#abort.abort(new TaskAbortedError(kind, this.task.taskId));
    }
  }
}
