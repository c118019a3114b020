package dev.taskbroker.client;

import dev.taskbroker.v1.TaskSpec;
import io.opentelemetry.api.trace.propagation.W3CTraceContextPropagator;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.propagation.TextMapGetter;
import java.util.HashMap;
import java.util.Map;

/**
 * W3C trace context across the queue through the OpenTelemetry API (docs/client-spec.md, point
 * 7). Without an OpenTelemetry SDK the current context carries no span and nothing is written.
 */
public final class Tracing {
  /** The metadata key (and gRPC header) of the trace context. */
  public static final String TRACEPARENT = "traceparent";

  private static final TextMapGetter<Map<String, String>> GETTER =
      new TextMapGetter<>() {
        @Override
        @SuppressWarnings("deprecation") // still abstract in the API: every getter implements it
        public Iterable<String> keys(Map<String, String> carrier) {
          return carrier.keySet();
        }

        @Override
        public String get(Map<String, String> carrier, String key) {
          return carrier == null ? null : carrier.get(key);
        }
      };

  private Tracing() {}

  /** The W3C headers of {@code cx} ({@code traceparent}, {@code tracestate}); empty without a span. */
  public static Map<String, String> headers(Context cx) {
    Map<String, String> out = new HashMap<>();
    W3CTraceContextPropagator.getInstance().inject(cx, out, (m, k, v) -> m.put(k, v));
    return out;
  }

  /** Writes the current context's traceparent into the task's metadata, unless it has one. */
  public static TaskSpec.Builder inject(TaskSpec.Builder spec) {
    String tp = headers(Context.current()).get(TRACEPARENT);
    if (tp != null && !spec.containsMetadata(TRACEPARENT)) {
      spec.putMetadata(TRACEPARENT, tp);
    }
    return spec;
  }

  /** The context a handler runs in: a child of the task's stored traceparent, if any. */
  public static Context extract(Map<String, String> metadata) {
    return W3CTraceContextPropagator.getInstance().extract(Context.root(), metadata, GETTER);
  }
}
