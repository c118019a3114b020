package dev.taskbroker.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.FailRequest;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.opentelemetry.sdk.metrics.data.HistogramPointData;
import io.opentelemetry.sdk.metrics.data.LongPointData;
import io.opentelemetry.sdk.metrics.data.MetricData;
import io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Typed handlers, one worker over several queues, middleware and the worker's metrics, against
 * FakeBroker, with the metrics read through the OpenTelemetry SDK's in-memory reader.
 */
class TypedWorkerTest {
  public record Email(String to, int n) {}

  public record Count(int n) {}

  public record Ok(boolean ok, int n) {}

  private FakeBroker fake;
  private InMemoryMetricReader reader;
  private SdkMeterProvider meters;

  @BeforeEach
  void setUp() throws Exception {
    fake = new FakeBroker();
    reader = InMemoryMetricReader.create();
    meters = SdkMeterProvider.builder().registerMetricReader(reader).build();
  }

  @AfterEach
  void tearDown() {
    meters.close();
    fake.close();
  }

  private Worker.Builder worker() {
    return Worker.builder(fake.taskbroker())
        .workerId("w1")
        .pollWait(Duration.ofSeconds(1))
        .meterProvider(meters)
        .onError((during, e) -> {});
  }

  private static void until(BooleanSupplier cond) throws InterruptedException {
    long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
    while (!cond.getAsBoolean()) {
      if (System.nanoTime() > end) {
        throw new AssertionError("condition not met in time");
      }
      Thread.sleep(10);
    }
  }

  private Map<String, String> results() {
    Map<String, String> m = new TreeMap<>();
    for (CompleteRequest c : fake.completes) {
      m.put(c.getTaskId(), c.getResult().toStringUtf8());
    }
    return m;
  }

  @Test
  void eachQueuesHandlerGetsItsDecodedPayloadAndItsValueIsTheJsonResult() throws Exception {
    String a = fake.add("emails", "{\"to\": \"a@example.com\", \"n\": 1, \"extra\": true}");
    String b = fake.add("counts", "{\"n\": 2}");
    List<Object> got = new CopyOnWriteArrayList<>();
    Worker w =
        worker()
            .handle("emails", Email.class, (task, email) -> { got.add(email); return new Ok(true, email.n()); })
            .handle("counts", Count.class, (task, count) -> { got.add(count); return new Ok(true, count.n()); })
            .build();
    w.start();
    until(() -> fake.completes.size() == 2);
    w.stop(Duration.ofSeconds(5));
    assertEquals(List.of("emails", "counts"), fake.leases.get(0).getQueuesList()); // one Lease for both
    assertTrue(got.contains(new Email("a@example.com", 1)), "got " + got);
    assertTrue(got.contains(new Count(2)), "got " + got);
    assertEquals(Map.of(a, "{\"ok\":true,\"n\":1}", b, "{\"ok\":true,\"n\":2}"), results());
    assertEquals(new Ok(true, 1), fake.taskbroker().serializer().decode(results().get(a).getBytes(), Ok.class));
  }

  @Test
  void aPayloadThatDoesNotDecodeFailsAtOnceNonRetryableNamingTheQueueAndType() throws Exception {
    fake.add("emails", "not json");
    Worker w = worker().handle("emails", Email.class, (task, email) -> new Ok(true, 0)).build();
    w.start();
    until(() -> fake.fails.size() == 1);
    w.stop(Duration.ofSeconds(5));
    FailRequest f = fake.fails.get(0);
    assertTrue(f.getNonRetryable());
    assertTrue(f.getErrorMessage().startsWith("queue emails: payload is not a valid Email: "), f.getErrorMessage());
    assertFalse(f.getErrorMessage().contains("\n"), f.getErrorMessage());
  }

  @Test
  void aValueTheSerializerCannotEncodeFailsTheAttemptRetryableNamingItsType() throws Exception {
    fake.add("q", "{}");
    Worker w = worker().handle("q", Count.class, (task, c) -> new Object()).build();
    w.start();
    until(() -> fake.fails.size() == 1);
    w.stop(Duration.ofSeconds(5));
    FailRequest f = fake.fails.get(0);
    assertFalse(f.getNonRetryable());
    assertTrue(f.getErrorMessage().startsWith("queue q: handler returned Object, which cannot be encoded: "), f.getErrorMessage());
  }

  @Test
  void middlewareRunsFirstRegisteredOutermostSeesTheOutcomeAndCanReplaceIt() throws Exception {
    fake.add("ok", "{\"n\": 1}");
    fake.add("bad", "{\"n\": 2}");
    List<String> trail = new CopyOnWriteArrayList<>();
    Worker w =
        worker()
            .handle("ok", Count.class, (task, c) -> new Ok(true, c.n()))
            .handle("bad", Count.class, (task, c) -> { throw new IllegalStateException("boom"); })
            .middleware((task, next) -> {
              trail.add("outer in " + task.queue());
              try {
                Object v = next.proceed();
                trail.add("outer out " + task.queue() + " " + v);
                return v;
              } catch (Exception e) {
                trail.add("outer error " + task.queue() + " " + e.getMessage());
                throw e;
              }
            })
            .middleware((task, next) -> {
              trail.add("inner in " + task.queue());
              try {
                return next.proceed();
              } catch (IllegalStateException e) {
                throw new PermanentException("permanent: " + e.getMessage());
              }
            })
            .concurrency(1)
            .build();
    w.start();
    until(() -> fake.completes.size() == 1 && fake.fails.size() == 1);
    w.stop(Duration.ofSeconds(5));
    assertTrue(trail.containsAll(List.of(
        "outer in ok", "inner in ok", "outer out ok Ok[ok=true, n=1]",
        "outer in bad", "inner in bad", "outer error bad permanent: boom")), "trail " + trail);
    assertTrue(trail.indexOf("outer in ok") < trail.indexOf("inner in ok"));
    assertTrue(fake.fails.get(0).getNonRetryable());
    assertEquals("permanent: boom", fake.fails.get(0).getErrorMessage());
  }

  @Test
  void metricsCountOutcomesDurationsAndSettleCalls() throws Exception {
    fake.add("ok", "{\"n\": 1}");
    fake.add("bad", "{\"n\": 2}");
    Worker w =
        worker()
            .handle("ok", Count.class, (task, c) -> new Ok(true, c.n()))
            .handle("bad", Count.class, (task, c) -> { throw new IllegalStateException("boom"); })
            .concurrency(1)
            .build();
    w.start();
    until(() -> fake.completes.size() == 1 && fake.fails.size() == 1);
    w.stop(Duration.ofSeconds(5)); // drained: every attempt is counted
    Map<String, Long> counts = new TreeMap<>();
    long durations = 0;
    for (MetricData m : reader.collectAllMetrics()) {
      if (m.getName().equals("taskbroker.worker.task.duration")) {
        assertEquals("s", m.getUnit());
        for (HistogramPointData p : m.getHistogramData().getPoints()) {
          durations += p.getCount();
        }
        continue;
      }
      if (!m.getName().startsWith("taskbroker.worker.")) {
        continue;
      }
      for (LongPointData p : m.getLongSumData().getPoints()) {
        counts.merge(m.getName() + " " + label(p.getAttributes()), p.getValue(), Long::sum);
      }
    }
    assertEquals(
        Map.of(
            "taskbroker.worker.tasks outcome=succeeded queue=ok", 1L,
            "taskbroker.worker.tasks outcome=failed queue=bad", 1L,
            "taskbroker.worker.settle.calls rpc=Complete", 1L,
            "taskbroker.worker.settle.calls rpc=Fail", 1L),
        counts);
    assertEquals(2, durations);
  }

  @Test
  void aLostLeaseAndSettleRetriesAreCounted() throws Exception {
    String lost = fake.add("q", "{\"n\": 1}");
    fake.lostIds.add(lost);
    fake.unavailableCompletes.set(1);
    fake.add("q", "{\"n\": 2}");
    Worker w =
        worker()
            .handle("q", Count.class, (task, c) -> {
              if (c.n() == 1) {
                while (!task.isCancelled()) {
                  Thread.sleep(5);
                }
              }
              return new Ok(true, c.n());
            })
            .heartbeatInterval(Duration.ofMillis(100))
            .concurrency(2)
            .build();
    w.start();
    until(() -> fake.completes.size() == 1);
    w.stop(Duration.ofSeconds(5));
    Map<String, Long> counts = new TreeMap<>();
    for (MetricData m : reader.collectAllMetrics()) {
      if (m.getName().equals("taskbroker.worker.leases.lost") || m.getName().equals("taskbroker.worker.settle.retries")) {
        for (LongPointData p : m.getLongSumData().getPoints()) {
          counts.merge(m.getName() + " " + label(p.getAttributes()), p.getValue(), Long::sum);
        }
      }
    }
    assertEquals(
        Map.of("taskbroker.worker.leases.lost queue=q", 1L, "taskbroker.worker.settle.retries queue=q", 1L),
        counts);
  }

  private static String label(Attributes a) {
    StringBuilder s = new StringBuilder();
    a.asMap().entrySet().stream()
        .sorted(Map.Entry.comparingByKey(java.util.Comparator.comparing(AttributeKey::getKey)))
        .forEach(e -> s.append(s.length() == 0 ? "" : " ").append(e.getKey().getKey()).append('=').append(e.getValue()));
    return s.toString();
  }

  @Test
  void withoutAMeterProviderTheGlobalOneAsSetWhenTheWorkerStartsIsUsed() throws Exception {
    fake.add("q", "{\"n\": 1}");
    Worker w =
        Worker.builder(fake.taskbroker())
            .handle("q", Count.class, (task, c) -> new Ok(true, c.n()))
            .workerId("w1")
            .pollWait(Duration.ofSeconds(1))
            .build();
    io.opentelemetry.api.GlobalOpenTelemetry.resetForTest();
    io.opentelemetry.api.GlobalOpenTelemetry.set(
        io.opentelemetry.sdk.OpenTelemetrySdk.builder().setMeterProvider(meters).build());
    try {
      w.start();
      until(() -> fake.completes.size() == 1);
      w.stop(Duration.ofSeconds(5));
    } finally {
      io.opentelemetry.api.GlobalOpenTelemetry.resetForTest();
    }
    long succeeded = 0;
    for (MetricData m : reader.collectAllMetrics()) {
      if (m.getName().equals("taskbroker.worker.tasks")) {
        for (LongPointData p : m.getLongSumData().getPoints()) {
          succeeded += p.getValue();
        }
      }
    }
    assertEquals(1, succeeded);
  }

  /** A handler method's generic parameter type, as a framework finds it by reflection. */
  static Object sum(TaskContext task, List<Count> counts) {
    return new Count(counts.stream().mapToInt(Count::n).sum());
  }

  @Test
  void registrationsFromAListDecodeGenericTypes() throws Exception {
    java.lang.reflect.Method m = TypedWorkerTest.class.getDeclaredMethod("sum", TaskContext.class, List.class);
    String id = fake.add("sums", "[{\"n\": 1}, {\"n\": 2}]");
    @SuppressWarnings("unchecked")
    Worker w =
        worker()
            .registrations(List.of(
                Registration.ofType("sums", m.getGenericParameterTypes()[1], (task, v) -> sum(task, (List<Count>) v)),
                Registration.of("counts", Count.class, (task, c) -> c)))
            .build();
    w.start();
    until(() -> fake.completes.size() == 1);
    w.stop(Duration.ofSeconds(5));
    assertEquals(Map.of(id, "{\"n\":3}"), results());
  }

  @Test
  void theBuilderRefusesTwoHandlersForOneQueueAndQueuesWithoutAHandler() {
    Worker.Builder b = worker().handle("q", Count.class, (task, c) -> null);
    assertThrows(IllegalArgumentException.class, () -> b.handle("q", task -> null));
    assertThrows(IllegalArgumentException.class, () -> worker().queues("q").build());
    assertThrows(IllegalArgumentException.class, () -> worker().build());
    Worker w =
        Worker.builder(fake.taskbroker(), task -> null)
            .queues("raw")
            .handle("typed", Count.class, (task, c) -> null)
            .build();
    assertEquals(List.of("typed", "raw"), w.queues());
    w.close();
  }

  @Test
  void typedSubmitEncodesWithTheSerializerAndBytesGoAsTheyAre() {
    Taskbroker tb = fake.taskbroker();
    assertEquals("{\"to\":\"a@example.com\",\"n\":1}", tb.spec("q", new Email("a@example.com", 1)).getPayload().toStringUtf8());
    assertEquals("not json", tb.spec("q", "not json".getBytes()).getPayload().toStringUtf8());
    assertThrows(SerializationException.class, () -> tb.spec("q", new Object()));
  }
}
