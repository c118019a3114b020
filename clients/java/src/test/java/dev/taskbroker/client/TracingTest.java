package dev.taskbroker.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import dev.taskbroker.v1.GetTaskRequest;
import dev.taskbroker.v1.SubmitResult;
import dev.taskbroker.v1.TaskSpec;
import dev.taskbroker.v1.TaskState;
import io.opentelemetry.api.GlobalOpenTelemetry;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.context.Scope;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.opentelemetry.sdk.metrics.data.MetricData;
import io.opentelemetry.sdk.metrics.data.PointData;
import io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader;
import io.opentelemetry.sdk.testing.exporter.InMemorySpanExporter;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import io.opentelemetry.sdk.trace.data.LinkData;
import io.opentelemetry.sdk.trace.data.SpanData;
import io.opentelemetry.sdk.trace.export.SimpleSpanProcessor;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The send and process spans and the messaging instruments (the OpenTelemetry messaging
 * conventions, docs/client-spec.md point 7), read from the SDK's InMemorySpanExporter and
 * InMemoryMetricReader installed as the global OpenTelemetry, against the live broker at
 * $TASKBROKER_ADDR (scripts/conformance.sh java starts one; skipped without it).
 */
class TracingTest {
  private final InMemorySpanExporter spans = InMemorySpanExporter.create();
  private final InMemoryMetricReader metrics = InMemoryMetricReader.create();
  private Taskbroker tb;
  private String queue;

  @BeforeEach
  void setUp() {
    String addr = System.getenv("TASKBROKER_ADDR");
    Assumptions.assumeTrue(addr != null && !addr.isEmpty(), "TASKBROKER_ADDR is not set");
    GlobalOpenTelemetry.resetForTest();
    GlobalOpenTelemetry.set(
        OpenTelemetrySdk.builder()
            .setTracerProvider(
                SdkTracerProvider.builder().addSpanProcessor(SimpleSpanProcessor.create(spans)).build())
            .setMeterProvider(SdkMeterProvider.builder().registerMetricReader(metrics).build())
            .build());
    tb = Taskbroker.fromEnv(addr);
    queue = "test.java.tracing." + Integer.toHexString(ThreadLocalRandom.current().nextInt());
  }

  @AfterEach
  void tearDown() {
    if (tb != null) {
      tb.close();
    }
    GlobalOpenTelemetry.resetForTest();
  }

  private SpanData span(String name) {
    List<SpanData> found = spans.getFinishedSpanItems().stream().filter(s -> s.getName().equals(name)).toList();
    assertEquals(1, found.size(), "spans named " + name + ": " + found);
    return found.get(0);
  }

  private static String traceparent(SpanContext sc) {
    return "00-" + sc.getTraceId() + "-" + sc.getSpanId() + "-" + sc.getTraceFlags().asHex();
  }

  private dev.taskbroker.v1.Task task(String id) {
    return tb.admin()
        .withDeadlineAfter(10, TimeUnit.SECONDS)
        .getTask(GetTaskRequest.newBuilder().setTaskId(id).build())
        .getTask();
  }

  /** The points of instrument {@code name} on this test's queue. */
  private List<PointData> points(String name) {
    List<PointData> out = new ArrayList<>();
    for (MetricData m : metrics.collectAllMetrics()) {
      if (m.getName().equals(name)) {
        for (PointData p : m.getData().getPoints()) {
          if (queue.equals(p.getAttributes().get(AttributeKey.stringKey("messaging.destination.name")))) {
            out.add(p);
          }
        }
      }
    }
    return out;
  }

  private static long value(PointData p) {
    return p instanceof io.opentelemetry.sdk.metrics.data.LongPointData l
        ? l.getValue()
        : ((io.opentelemetry.sdk.metrics.data.HistogramPointData) p).getCount();
  }

  private Worker start(TaskHandler h) {
    Worker w = Worker.builder(tb, h).queues(queue).workerId("test-java").pollWait(Duration.ofSeconds(1)).build();
    w.start();
    return w;
  }

  @Test
  @SuppressWarnings("try") // the scope makes the request span current for the submit
  void submitSendsInAProducerSpanAndTheHandlerRunsInALinkedConsumerSpan() throws Exception {
    Span request = GlobalOpenTelemetry.getTracer("test").spanBuilder("request").startSpan();
    SubmitResult result;
    try (Scope s = request.makeCurrent()) {
      result = tb.submit(TaskSpec.newBuilder().setQueue(queue).setPayload(ByteString.copyFromUtf8("x")).build());
    } finally {
      request.end();
    }
    String id = result.getTaskId();
    SpanData send = span("send " + queue);
    assertEquals(SpanKind.PRODUCER, send.getKind());
    assertEquals(request.getSpanContext().getSpanId(), send.getParentSpanId());
    assertEquals(
        Attributes.builder()
            .put("messaging.system", "taskbroker")
            .put("messaging.operation.type", "send")
            .put("messaging.operation.name", "submit")
            .put("messaging.destination.name", queue)
            .put("messaging.message.id", id)
            .build()
            .asMap(),
        send.getAttributes().asMap());
    // The send span's context is the task's creation context.
    assertEquals(traceparent(send.getSpanContext()), task(id).getMetadataMap().get("traceparent"));

    AtomicReference<SpanContext> current = new AtomicReference<>();
    AtomicReference<SpanContext> ofTask = new AtomicReference<>();
    Worker w =
        start(
            ctx -> {
              current.set(Span.current().getSpanContext());
              ofTask.set(Span.fromContext(ctx.traceContext()).getSpanContext());
              throw new PermanentException("no such image");
            });
    try {
      assertThrows(TaskFailedException.class, () -> tb.waitFor(id, Duration.ofSeconds(20)));
    } finally {
      w.stop(Duration.ofSeconds(5));
    }

    SpanData process = span("process " + queue);
    assertEquals(SpanKind.CONSUMER, process.getKind());
    assertEquals(send.getSpanContext().getSpanId(), process.getParentSpanId());
    assertEquals(request.getSpanContext().getTraceId(), process.getTraceId());
    assertEquals(
        List.of(send.getSpanContext().getSpanId()),
        process.getLinks().stream().map(l -> l.getSpanContext().getSpanId()).toList());
    assertEquals(process.getSpanContext(), current.get()); // the handler runs inside it
    assertEquals(process.getSpanContext(), ofTask.get());
    Attributes a = process.getAttributes();
    assertEquals("taskbroker", a.get(AttributeKey.stringKey("messaging.system")));
    assertEquals("process", a.get(AttributeKey.stringKey("messaging.operation.type")));
    assertEquals("process", a.get(AttributeKey.stringKey("messaging.operation.name")));
    assertEquals(queue, a.get(AttributeKey.stringKey("messaging.destination.name")));
    assertEquals(id, a.get(AttributeKey.stringKey("messaging.message.id")));
    assertEquals(PermanentException.class.getName(), a.get(AttributeKey.stringKey("error.type")));
    assertEquals(StatusCode.ERROR, process.getStatus().getStatusCode());
    assertEquals("no such image", process.getStatus().getDescription());

    List<PointData> sent = points("messaging.client.sent.messages");
    assertEquals(1, sent.size());
    assertEquals(1, value(sent.get(0)));
    assertEquals("submit", sent.get(0).getAttributes().get(AttributeKey.stringKey("messaging.operation.name")));
    List<PointData> consumed = points("messaging.client.consumed.messages");
    assertEquals(1, consumed.size());
    assertEquals(1, value(consumed.get(0)));
    List<PointData> duration = points("messaging.process.duration");
    assertEquals(1, duration.size());
    assertEquals(1, value(duration.get(0)));
    assertEquals(
        PermanentException.class.getName(),
        duration.get(0).getAttributes().get(AttributeKey.stringKey("error.type")));
  }

  @Test
  void aBatchSubmitCountsItsTasksAndKeepsACreationContextTheCallerSet() {
    String custom = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    List<SubmitResult> results =
        tb.submitAll(
            List.of(
                TaskSpec.newBuilder().setQueue(queue).build(),
                TaskSpec.newBuilder().setQueue(queue).build(),
                TaskSpec.newBuilder().setQueue(queue).putAllMetadata(Map.of("traceparent", custom)).build()));
    SpanData send = span("send " + queue);
    assertFalse(send.getParentSpanContext().isValid()); // no current span: the send span starts the trace
    assertEquals(3L, send.getAttributes().get(AttributeKey.longKey("messaging.batch.message_count")));
    assertNull(send.getAttributes().get(AttributeKey.stringKey("messaging.message.id")));
    assertEquals(
        List.of("4bf92f3577b34da6a3ce929d0e0e4736"),
        send.getLinks().stream().map(LinkData::getSpanContext).map(SpanContext::getTraceId).toList());
    String own = traceparent(send.getSpanContext());
    assertEquals(
        List.of(own, own, custom),
        results.stream().map(r -> task(r.getTaskId()).getMetadataMap().get("traceparent")).toList());
    List<PointData> sent = points("messaging.client.sent.messages");
    assertEquals(1, sent.size());
    assertEquals(3, value(sent.get(0)));
  }

  @Test
  void aHandlerThatSucceedsLeavesItsProcessSpanUnset() throws Exception {
    String id = tb.submit(TaskSpec.newBuilder().setQueue(queue).build()).getTaskId();
    Worker w = start(ctx -> "ok".getBytes());
    try {
      assertEquals(TaskState.TASK_STATE_SUCCEEDED, tb.waitFor(id, Duration.ofSeconds(20)).getState());
    } finally {
      w.stop(Duration.ofSeconds(5));
    }
    SpanData send = span("send " + queue);
    SpanData process = span("process " + queue);
    assertEquals(send.getSpanContext().getSpanId(), process.getParentSpanId());
    assertEquals(1, process.getLinks().size());
    assertEquals(StatusCode.UNSET, process.getStatus().getStatusCode());
    assertNull(process.getAttributes().get(AttributeKey.stringKey("error.type")));
    List<PointData> duration = points("messaging.process.duration");
    assertEquals(1, duration.size());
    assertTrue(duration.get(0).getAttributes().get(AttributeKey.stringKey("error.type")) == null);
  }
}
