package dev.taskbroker.client;

import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.SubmitRequest;
import dev.taskbroker.v1.SubmitResponse;
import dev.taskbroker.v1.TaskSpec;
import io.grpc.StatusRuntimeException;
import io.opentelemetry.api.OpenTelemetry;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.common.AttributesBuilder;
import io.opentelemetry.api.metrics.LongCounter;
import io.opentelemetry.api.metrics.MeterProvider;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanBuilder;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.api.trace.propagation.W3CTraceContextPropagator;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.Scope;
import io.opentelemetry.context.propagation.TextMapGetter;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Tracing across the queue through the OpenTelemetry API (docs/client-spec.md, point 7), after
 * the OpenTelemetry messaging semantic conventions, from the global OpenTelemetry
 * ({@code GlobalOpenTelemetry}, tracer and meter {@code taskbroker}):
 *
 * <ul>
 *   <li>every call carries the current context as its W3C {@code traceparent} header;
 *   <li>Submit runs in a {@code send {queue}} span (kind PRODUCER, {@code
 *       messaging.operation.name} {@code submit}) whose context goes into each task's {@code
 *       traceparent} metadata as its creation context, unless the caller set one there (one equal
 *       to the current context's counts as unset): that one is kept and the span links to it;
 *   <li>the worker runs each handler in a {@code process {queue}} span (kind CONSUMER) whose
 *       parent is the task's stored traceparent and which links to that same context; a handler
 *       that throws ends it with status ERROR and {@code error.type}.
 * </ul>
 *
 * Without an OpenTelemetry SDK the spans record nothing and only the W3C trace context travels.
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

  /** The tracer and meter the client's spans and instruments come from. */
  static final String INSTRUMENTATION = "taskbroker";

  static final String SYSTEM = "taskbroker";
  static final AttributeKey<String> MESSAGING_SYSTEM = AttributeKey.stringKey("messaging.system");
  static final AttributeKey<String> DESTINATION = AttributeKey.stringKey("messaging.destination.name");
  static final AttributeKey<String> OPERATION_NAME = AttributeKey.stringKey("messaging.operation.name");
  static final AttributeKey<String> OPERATION_TYPE = AttributeKey.stringKey("messaging.operation.type");
  static final AttributeKey<String> MESSAGE_ID = AttributeKey.stringKey("messaging.message.id");
  static final AttributeKey<Long> BATCH_COUNT = AttributeKey.longKey("messaging.batch.message_count");
  static final AttributeKey<String> ERROR_TYPE = AttributeKey.stringKey("error.type");

  /** Set once the API is found to lack {@code GlobalOpenTelemetry.getOrNoop} (before 1.57). */
  private static volatile boolean olderApi;

  /**
   * The global OpenTelemetry, looked up without fixing the global to a no-op the way {@code
   * GlobalOpenTelemetry.get()} does when nothing is installed yet; a no-op on an API before 1.57.
   */
  static OpenTelemetry global() {
    if (!olderApi) {
      try {
        return io.opentelemetry.api.GlobalOpenTelemetry.getOrNoop();
      } catch (NoSuchMethodError e) {
        olderApi = true;
      }
    }
    return OpenTelemetry.noop();
  }

  /**
   * The {@code error.type} of a failure: a gRPC status code's name ({@code UNAVAILABLE}), else the
   * exception's class name ({@code dev.taskbroker.client.PermanentException}).
   */
  static String errorType(Throwable t) {
    if (t instanceof StatusRuntimeException e) {
      return e.getStatus().getCode().name();
    }
    return t.getClass().getName();
  }

  /** The attributes of the {@code messaging.*} instruments; {@code error.type} only on failure. */
  static Attributes messagingAttributes(String queue, String operation, Throwable error) {
    AttributesBuilder b =
        Attributes.builder()
            .put(MESSAGING_SYSTEM, SYSTEM)
            .put(DESTINATION, queue)
            .put(OPERATION_NAME, operation);
    if (error != null) {
      b.put(ERROR_TYPE, errorType(error));
    }
    return b.build();
  }

  private static void fail(Span span, Throwable t) {
    span.setStatus(StatusCode.ERROR, t.getMessage() != null ? t.getMessage() : t.getClass().getName());
    span.setAttribute(ERROR_TYPE, errorType(t));
    span.recordException(t);
  }

  private static String traceparent(SpanContext sc) {
    return sc.isValid()
        ? "00-" + sc.getTraceId() + "-" + sc.getSpanId() + "-" + sc.getTraceFlags().asHex()
        : null;
  }

  /** The sent counter and the meter provider it came from (the global may be set later). */
  private record SentCounter(MeterProvider provider, LongCounter counter) {}

  private static volatile SentCounter sent;

  private static void countSent(java.util.List<TaskSpec> tasks, Throwable error) {
    MeterProvider provider = global().getMeterProvider();
    SentCounter c = sent;
    if (c == null || c.provider() != provider) {
      c =
          new SentCounter(
              provider,
              provider
                  .get(INSTRUMENTATION)
                  .counterBuilder("messaging.client.sent.messages")
                  .setUnit("{message}")
                  .setDescription("Tasks sent in Submit calls")
                  .build());
      sent = c;
    }
    Map<String, Long> byQueue = new LinkedHashMap<>();
    for (TaskSpec t : tasks) {
      byQueue.merge(t.getQueue(), 1L, Long::sum);
    }
    for (Map.Entry<String, Long> e : byQueue.entrySet()) {
      c.counter().add(e.getValue(), messagingAttributes(e.getKey(), "submit", error));
    }
  }

  /**
   * The {@code send} span of one Submit call, started in the current context: {@link #request()}
   * is the request with the creation context in each task's metadata; run the call with the span
   * current ({@link #makeCurrent()}), then end it with {@link #sent} or {@link #failed}.
   */
  static final class Send {
    private final Span span;
    private final SubmitRequest request;

    private Send(Span span, SubmitRequest request) {
      this.span = span;
      this.request = request;
    }

    SubmitRequest request() {
      return request;
    }

    Scope makeCurrent() {
      return span.makeCurrent();
    }

    SubmitResponse sent(SubmitResponse response) {
      if (request.getTasksCount() == 1 && response.getResultsCount() == 1) {
        span.setAttribute(MESSAGE_ID, response.getResults(0).getTaskId());
      }
      span.end();
      countSent(request.getTasksList(), null);
      return response;
    }

    void failed(Throwable t) {
      fail(span, t);
      span.end();
      countSent(request.getTasksList(), t);
    }
  }

  static Send send(SubmitRequest req) {
    String ambient = headers(Context.current()).get(TRACEPARENT);
    java.util.Set<String> queues = new java.util.HashSet<>();
    for (TaskSpec t : req.getTasksList()) {
      queues.add(t.getQueue());
    }
    String queue = queues.size() == 1 ? queues.iterator().next() : "";
    SpanBuilder b =
        global()
            .getTracer(INSTRUMENTATION)
            .spanBuilder(queue.isEmpty() ? "send" : "send " + queue)
            .setSpanKind(SpanKind.PRODUCER)
            .setAttribute(MESSAGING_SYSTEM, SYSTEM)
            .setAttribute(OPERATION_TYPE, "send")
            .setAttribute(OPERATION_NAME, "submit");
    if (!queue.isEmpty()) {
      b.setAttribute(DESTINATION, queue);
    }
    if (req.getTasksCount() > 1) {
      b.setAttribute(BATCH_COUNT, (long) req.getTasksCount());
    }
    for (TaskSpec t : req.getTasksList()) {
      String tp = t.getMetadataOrDefault(TRACEPARENT, null);
      if (tp != null && !tp.equals(ambient)) {
        SpanContext sc = Span.fromContext(extract(Map.of(TRACEPARENT, tp))).getSpanContext();
        if (sc.isValid()) {
          b.addLink(sc);
        }
      }
    }
    Span span = b.startSpan();
    String own = traceparent(span.getSpanContext());
    if (own == null) {
      own = ambient;
    }
    SubmitRequest stamped = req;
    if (own != null) {
      SubmitRequest.Builder rb = req.toBuilder();
      for (TaskSpec.Builder t : rb.getTasksBuilderList()) {
        String tp = t.getMetadataOrDefault(TRACEPARENT, null);
        if (tp == null || tp.equals(ambient)) {
          t.putMetadata(TRACEPARENT, own);
        }
      }
      stamped = rb.build();
    }
    return new Send(span, stamped);
  }

  /**
   * Runs a leased task's handler {@code fn} in its {@code process} span, a child of {@code
   * creation} (the task's stored traceparent) linked to it; the handler sees the span's context
   * as {@code Context.current()} and as {@code ctx.traceContext()}. Counts the task in {@code
   * messaging.client.consumed.messages} and its run in {@code messaging.process.duration}.
   */
  @SuppressWarnings("try") // the scope is what makes the span current for the handler
  static Object process(TaskContext ctx, WorkerMetrics metrics, Middleware.Next fn) throws Exception {
    LeasedTask task = ctx.task();
    metrics.consumed(task.getQueue());
    long started = System.nanoTime();
    Context creation = ctx.traceContext();
    SpanContext sc = Span.fromContext(creation).getSpanContext();
    SpanBuilder b =
        global()
            .getTracer(INSTRUMENTATION)
            .spanBuilder("process " + task.getQueue())
            .setParent(creation)
            .setSpanKind(SpanKind.CONSUMER)
            .setAttribute(MESSAGING_SYSTEM, SYSTEM)
            .setAttribute(OPERATION_TYPE, "process")
            .setAttribute(OPERATION_NAME, "process")
            .setAttribute(DESTINATION, task.getQueue())
            .setAttribute(MESSAGE_ID, task.getTaskId())
            .setAttribute(AttributeKey.longKey("taskbroker.attempt"), (long) task.getAttempt());
    if (sc.isValid()) {
      b.addLink(sc);
    }
    Span span = b.startSpan();
    // Without an SDK the span is invalid: the handler runs in the stored context alone.
    Context cx = span.getSpanContext().isValid() ? creation.with(span) : creation;
    ctx.traceContext(cx);
    Throwable failed = null;
    try (Scope scope = cx.makeCurrent()) {
      return fn.proceed();
    } catch (Exception | Error e) {
      failed = e;
      fail(span, e);
      throw e;
    } finally {
      span.end();
      metrics.processed(task.getQueue(), (System.nanoTime() - started) / 1e9, failed);
    }
  }
}
