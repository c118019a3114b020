/**
 * W3C trace context across the queue through the OpenTelemetry API (docs/client-spec.md,
 * point 7). `@opentelemetry/api` is an optional peer dependency: without it nothing is
 * propagated. The traceparent is read and written here directly, so no global propagator has
 * to be installed; the handler's context becomes active only with a context manager (the SDK's
 * AsyncLocalStorageContextManager), and is always available as `ctx.traceContext`.
 */
import { createRequire } from "node:module";
import type * as OtelApi from "@opentelemetry/api";

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
