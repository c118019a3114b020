/**
 * Tracing across the queue through the OpenTelemetry API (docs/client-spec.md, point 7): W3C
 * trace context in every call and task, a `send` span around Submit and a `process` span
 * around each handler run, after the OpenTelemetry messaging conventions.
 * `@opentelemetry/api` is an optional peer dependency: without it nothing is traced or
 * propagated. The traceparent is read and written here directly, so no global propagator has
 * to be installed; the handler's context becomes active only with a context manager (the SDK's
 * AsyncLocalStorageContextManager), and is always available as `ctx.traceContext`.
 */
import { createRequire } from "node:module";
import type * as OtelApi from "@opentelemetry/api";
import { errorType, MESSAGING_SYSTEM, sentMessages, type WorkerMetrics } from "./metrics.js";

/**
 * An OpenTelemetry `Context` (the same shape), declared here so this package's types do not
 * need the optional `@opentelemetry/api` installed.
 */
export interface TraceContext {
  getValue(key: symbol): unknown;
  setValue(key: symbol, value: unknown): TraceContext;
  deleteValue(key: symbol): TraceContext;
}

/** The task metadata key (and gRPC header) of the trace context. */
export const TRACEPARENT = "traceparent";

const otel: typeof OtelApi | undefined = (() => {
  try {
    return createRequire(import.meta.url)("@opentelemetry/api") as typeof OtelApi;
  } catch {
    return undefined;
  }
})();

/** The traceparent of the active context's span, or undefined. */
export function currentTraceparent(): string | undefined {
  if (!otel) return undefined;
  const sc = otel.trace.getSpanContext(otel.context.active());
  if (!sc || !otel.isSpanContextValid(sc)) return undefined;
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, "0")}`;
}

/** The OpenTelemetry context a task's handler runs in: the producer's, from its traceparent. */
export function taskContext(metadata: Record<string, string>): TraceContext | undefined {
  if (!otel) return undefined;
  const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(metadata[TRACEPARENT] ?? "");
  if (!m) return otel.ROOT_CONTEXT;
  const sc = { traceId: m[1]!, spanId: m[2]!, traceFlags: parseInt(m[3]!, 16), isRemote: true };
  return otel.isSpanContextValid(sc) ? otel.trace.setSpanContext(otel.ROOT_CONTEXT, sc) : otel.ROOT_CONTEXT;
}

/** Runs `fn` with `cx` active (when there is an API and a context). */
export function withContext<T>(cx: TraceContext | undefined, fn: () => T): T {
  return otel && cx ? otel.context.with(cx as OtelApi.Context, fn) : fn();
}

/*
 * Spans after the OpenTelemetry messaging semantic conventions, from the global tracer
 * provider (`trace.setGlobalTracerProvider`, tracer `taskbroker`). Without an SDK the spans
 * record nothing and only the W3C trace context travels.
 */

/** The tracer (and meter) the client's spans and instruments come from. */
export const INSTRUMENTATION_NAME = "taskbroker";

function traceparentOf(sc: OtelApi.SpanContext | undefined): string | undefined {
  if (!sc || !otel?.isSpanContextValid(sc)) return undefined;
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, "0")}`;
}

function spanContextOf(traceparent: string | undefined): OtelApi.SpanContext | undefined {
  const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(traceparent ?? "");
  if (!m || !otel) return undefined;
  const sc = { traceId: m[1]!, spanId: m[2]!, traceFlags: parseInt(m[3]!, 16), isRemote: true };
  return otel.isSpanContextValid(sc) ? sc : undefined;
}

function fail(span: OtelApi.Span, error: unknown): void {
  span.setStatus({ code: otel!.SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
  span.setAttribute("error.type", errorType(error));
  if (error instanceof Error) span.recordException(error);
}

type SubmittedTask = { queue?: string; metadata?: { [key: string]: string } };

/**
 * The `send {queue}` span (kind PRODUCER) of one Submit call, started in the active context.
 * Its context is the tasks' creation context: `stamp` writes it into each task's metadata
 * unless the caller set a traceparent there (one equal to the active context's counts as
 * unset); the span links to each one the caller set.
 */
export class SendSpan {
  /** The traceparent of the span (the active context's without an SDK), for the call's header. */
  readonly traceparent: string | undefined;
  readonly #span: OtelApi.Span | undefined;
  readonly #ambient: string | undefined;
  readonly #tasks: readonly SubmittedTask[];

  constructor(tasks: readonly SubmittedTask[]) {
    this.#tasks = tasks;
    this.#ambient = currentTraceparent();
    if (!otel) {
      this.traceparent = undefined;
      this.#span = undefined;
      return;
    }
    const queues = new Set(tasks.map((t) => t.queue ?? ""));
    const queue = queues.size === 1 ? [...queues][0]! : "";
    const attributes: OtelApi.Attributes = {
      "messaging.system": MESSAGING_SYSTEM,
      "messaging.operation.type": "send",
      "messaging.operation.name": "submit",
    };
    if (queue) attributes["messaging.destination.name"] = queue;
    if (tasks.length > 1) attributes["messaging.batch.message_count"] = tasks.length;
    const links: OtelApi.Link[] = [];
    for (const t of tasks) {
      const tp = t.metadata?.[TRACEPARENT];
      const sc = tp !== undefined && tp !== this.#ambient ? spanContextOf(tp) : undefined;
      if (sc) links.push({ context: sc });
    }
    this.#span = otel.trace
      .getTracer(INSTRUMENTATION_NAME)
      .startSpan(queue ? `send ${queue}` : "send", { kind: otel.SpanKind.PRODUCER, attributes, links });
    this.traceparent = traceparentOf(this.#span.spanContext()) ?? this.#ambient;
  }

  /** Writes the creation context into the metadata of the tasks the call sends. */
  stamp(tasks: readonly { metadata: { [key: string]: string } }[]): void {
    const own = this.traceparent;
    if (!own) return;
    for (const t of tasks) {
      const tp = t.metadata[TRACEPARENT];
      if (tp === undefined || tp === this.#ambient) t.metadata[TRACEPARENT] = own;
    }
  }

  /** Ends the span after the call answered: `messaging.message.id` for one task. */
  sent<R extends { taskId: string }>(results: R[]): R[] {
    if (this.#span && results.length === 1 && this.#tasks.length === 1) {
      this.#span.setAttribute("messaging.message.id", results[0]!.taskId);
    }
    this.#end(undefined);
    return results;
  }

  /** Ends the span after the call failed: status ERROR with the message, `error.type`. */
  failed(error: unknown): void {
    if (this.#span) fail(this.#span, error);
    this.#end({ error });
  }

  #end(failure: { error: unknown } | undefined): void {
    this.#span?.end();
    sentMessages(this.#tasks, failure);
  }
}

/**
 * Runs a leased task's handler `fn` in its `process {queue}` span (kind CONSUMER), whose
 * parent is the task's stored traceparent (`creation`, from `taskContext`) and which links to
 * that same context; `fn` gets the span's context (active while it runs, with a context
 * manager). A handler that throws ends it with status ERROR and `error.type`. Counts the task
 * in `messaging.client.consumed.messages` and its run in `messaging.process.duration`.
 */
export async function inProcessSpan<T>(
  task: { taskId: string; queue: string; attempt: number },
  creation: TraceContext | undefined,
  metrics: WorkerMetrics,
  fn: (cx: TraceContext | undefined) => Promise<T>,
): Promise<T> {
  metrics.consumed(task.queue);
  const started = performance.now();
  let error: unknown;
  let failed = false;
  let span: OtelApi.Span | undefined;
  let cx = creation;
  if (otel) {
    const parent = (creation ?? otel.ROOT_CONTEXT) as OtelApi.Context;
    const sc = otel.trace.getSpanContext(parent);
    span = otel.trace.getTracer(INSTRUMENTATION_NAME).startSpan(
      `process ${task.queue}`,
      {
        kind: otel.SpanKind.CONSUMER,
        attributes: {
          "messaging.system": MESSAGING_SYSTEM,
          "messaging.operation.type": "process",
          "messaging.operation.name": "process",
          "messaging.destination.name": task.queue,
          "messaging.message.id": task.taskId,
          "taskbroker.attempt": task.attempt,
        },
        links: sc && otel.isSpanContextValid(sc) ? [{ context: sc }] : [],
      },
      parent,
    );
    // Without an SDK the span is invalid: the handler runs in the stored context alone.
    if (otel.isSpanContextValid(span.spanContext())) cx = otel.trace.setSpan(parent, span);
  }
  try {
    return await withContext(cx, () => fn(cx));
  } catch (e) {
    failed = true;
    error = e;
    if (span) fail(span, e);
    throw e;
  } finally {
    span?.end();
    metrics.processed(task.queue, (performance.now() - started) / 1000, failed ? { error } : undefined);
  }
}
