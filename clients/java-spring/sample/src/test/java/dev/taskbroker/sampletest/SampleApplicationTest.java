package dev.taskbroker.sampletest;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.AppenderBase;
import dev.taskbroker.client.TaskContext;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import dev.taskbroker.client.WorkerStoppedException;
import dev.taskbroker.sample.Mailer;
import dev.taskbroker.sample.SampleApplication;
import dev.taskbroker.spring.TaskHandler;
import dev.taskbroker.spring.TaskbrokerWorkers;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskState;
import io.micrometer.core.instrument.MeterRegistry;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.slf4j.LoggerFactory;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;

/**
 * The sample application against a live broker (TASKBROKER_ADDR, started by test.sh): its
 * annotated handler runs a submitted task to SUCCEEDED with its result, the metrics reach the
 * Micrometer registry, and closing the context stops the worker within its stop timeout.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class SampleApplicationTest {
  private static String addr;
  private static Taskbroker tb;

  @BeforeAll
  static void connect() {
    addr = System.getenv("TASKBROKER_ADDR");
    assertNotNull(addr, "TASKBROKER_ADDR is not set: run clients/java-spring/test.sh, which starts a broker");
    tb = Taskbroker.connect(addr);
    // Spring Boot would reset Logback when each context starts, dropping the appenders the
    // logging tests attach; Logback's own configuration stays in force.
    System.setProperty("org.springframework.boot.logging.LoggingSystem", "none");
  }

  @AfterAll
  static void disconnect() {
    tb.close();
  }

  private static ConfigurableApplicationContext start(Class<?>[] sources, String... args) {
    String[] all = new String[args.length + 2];
    all[0] = "--taskbroker.address=" + addr;
    all[1] = "--spring.main.banner-mode=off";
    System.arraycopy(args, 0, all, 2, args.length);
    return new SpringApplicationBuilder(sources).run(all);
  }

  @Test
  @SuppressWarnings("unchecked")
  void theActuatorsHealthHasTheBrokerAndTheWorker() {
    ConfigurableApplicationContext ctx =
        start(new Class<?>[] {SampleApplication.class}, "--management.endpoint.health.show-details=always");
    try {
      org.springframework.boot.actuate.health.HealthEndpoint health =
          ctx.getBean(org.springframework.boot.actuate.health.HealthEndpoint.class);
      org.springframework.boot.actuate.health.Health h =
          (org.springframework.boot.actuate.health.Health) health.healthForPath("taskbroker");
      assertNotNull(h, "the actuator has the taskbroker health");
      assertEquals(org.springframework.boot.actuate.health.Status.UP, h.getStatus(), String.valueOf(h.getDetails()));
      assertEquals("SERVING", h.getDetails().get("broker"));
      java.util.Map<String, Object> mail =
          (java.util.Map<String, Object>) ((java.util.Map<String, Object>) h.getDetails().get("workers")).get("mail");
      assertEquals(true, mail.get("running"));
      assertEquals(List.of("emails"), mail.get("queues"));
    } finally {
      ctx.close();
    }
  }

  @Test
  void annotatedHandlerRunsTaskToSucceededWithItsResult() throws Exception {
    ConfigurableApplicationContext ctx = start(new Class<?>[] {SampleApplication.class});
    Worker worker = ctx.getBean(TaskbrokerWorkers.class).workers().get("mail");
    MeterRegistry registry = ctx.getBean(MeterRegistry.class);
    try {
      assertNotNull(worker, "the worker mail of application.yaml");
      assertTrue(worker.isRunning(), "the worker runs once the context is ready");
      assertEquals(List.of("emails"), worker.queues());
      assertEquals("sample", worker.labels().get("app"));

      String id = tb.submit("emails", new Mailer.Email("ada@example.com", "hi")).getTaskId();
      Task done = tb.waitFor(id, Duration.ofSeconds(30));
      assertEquals(TaskState.TASK_STATE_SUCCEEDED, done.getState(), done.getLastError());
      assertEquals(new Mailer.Sent("msg-ada@example.com", 1), tb.result(done, Mailer.Sent.class));
    } finally {
      ctx.close(); // drains the worker: every attempt it finished is counted
    }
    assertFalse(worker.isRunning(), "the worker stopped with the context");
    assertEquals(
        1.0,
        registry.get("taskbroker.worker.tasks").tags("queue", "emails", "outcome", "succeeded").counter().count());
    assertEquals(
        1L,
        registry.get("taskbroker.worker.task.duration").tags("queue", "emails", "outcome", "succeeded").timer().count());
  }

  /** Test handlers: a slow one, and one of a generic payload without a TaskContext. */
  static class TestHandlers {
    /** Set by the stop test only: a slow task another test's context leases is not held. */
    static volatile boolean block;

    final CountDownLatch running = new CountDownLatch(1);
    final AtomicReference<Object> endedBy = new AtomicReference<>();

    @TaskHandler(queue = "spring-slow")
    public String slow(String payload, TaskContext ctx) {
      if (!block) {
        return "not blocked";
      }
      running.countDown();
      try {
        new CountDownLatch(1).await(); // until the stop interrupts it
        return "never";
      } catch (InterruptedException e) {
        endedBy.set(ctx.abortKind().orElse(null));
        Thread.currentThread().interrupt();
        throw new IllegalStateException("interrupted");
      }
    }

    @TaskHandler(queue = "spring-batch")
    public int count(List<Mailer.Email> emails) {
      return emails.size();
    }
  }

  @Test
  void genericPayloadParameterDecodes() throws Exception {
    ConfigurableApplicationContext ctx =
        start(new Class<?>[] {SampleApplication.class, TestHandlers.class},
            "--taskbroker.workers.other.concurrency=2");
    try {
      String id =
          tb.submit("spring-batch", List.of(new Mailer.Email("a@x", "1"), new Mailer.Email("b@x", "2")))
              .getTaskId();
      Task done = tb.waitFor(id, Duration.ofSeconds(30));
      assertEquals(TaskState.TASK_STATE_SUCCEEDED, done.getState(), done.getLastError());
      assertEquals(2, tb.result(done, Integer.class));
      assertEquals(
          java.util.Set.of("spring-slow", "spring-batch"),
          java.util.Set.copyOf(ctx.getBean(TaskbrokerWorkers.class).workers().get("other").queues()));
    } finally {
      ctx.close();
    }
  }

  @Test
  void closingTheContextStopsTheWorkerWithinItsStopTimeout() throws Exception {
    ConfigurableApplicationContext ctx =
        start(new Class<?>[] {SampleApplication.class, TestHandlers.class},
            "--taskbroker.workers.slow.queues=spring-slow,spring-batch",
            "--taskbroker.workers.slow.stop-timeout=2s",
            "--taskbroker.workers.slow.stop-grace=1s");
    Worker worker = ctx.getBean(TaskbrokerWorkers.class).workers().get("slow");
    TestHandlers handlers = ctx.getBean(TestHandlers.class);
    TestHandlers.block = true;
    try {
      tb.submit("spring-slow", "wait " + UUID.randomUUID());
      assertTrue(handlers.running.await(30, TimeUnit.SECONDS), "the slow handler never ran");
    } finally {
      TestHandlers.block = false; // its retry, handed back at the stop, runs through elsewhere
    }
    // The bound of a stop is stop-timeout + stop-grace + 1 s = 4 s here; the client's default
    // (23 s) would not fit in 10 s, so this fails if the property did not reach the worker.
    assertTimeoutPreemptively(Duration.ofSeconds(10), ctx::close);
    assertFalse(worker.isRunning(), "the worker stopped with the context");
    assertEquals(TaskContext.AbortKind.STOPPING, handlers.endedBy.get(), "the handler was interrupted by the stop");
  }

  /** Receives the events of one logger at or above a level; a latch counts the first. */
  static final class Capture extends AppenderBase<ILoggingEvent> {
    final CountDownLatch seen = new CountDownLatch(1);
    final AtomicReference<ILoggingEvent> first = new AtomicReference<>();
    private final Level level;

    Capture(String logger, Level level) {
      this.level = level;
      Logger l = (Logger) LoggerFactory.getLogger(logger);
      setContext(l.getLoggerContext());
      start();
      l.addAppender(this);
    }

    @Override
    protected void append(ILoggingEvent e) {
      if (e.getLevel().isGreaterOrEqual(level) && first.compareAndSet(null, e)) {
        seen.countDown();
      }
    }
  }

  @Test
  void failFastStopsTheWorkerAndLogsItThroughSlf4j() throws Exception {
    Capture capture = new Capture(TaskbrokerWorkers.class.getName(), Level.ERROR);
    // TLS against the broker's plaintext port: a mistake retrying cannot fix.
    ConfigurableApplicationContext ctx =
        start(new Class<?>[] {SampleApplication.class}, "--taskbroker.tls.enabled=true", "--taskbroker.fail-fast=true");
    try {
      Worker worker = ctx.getBean(TaskbrokerWorkers.class).workers().get("mail");
      RuntimeException stopped = assertThrows(RuntimeException.class, worker::awaitStopped);
      assertInstanceOf(WorkerStoppedException.class, stopped);
      assertTrue(capture.seen.await(30, TimeUnit.SECONDS), "no ERROR logged for the stopped worker");
      String line = capture.first.get().getFormattedMessage();
      assertTrue(line.startsWith("taskbroker worker mail stopped: "), line);
    } finally {
      ctx.close();
    }
  }

  @Test
  void withoutFailFastTheClientsWarningsReachSlf4jAndTheWorkerRetries() throws Exception {
    Capture capture = new Capture(Worker.class.getName(), Level.WARN);
    ConfigurableApplicationContext ctx =
        start(new Class<?>[] {SampleApplication.class}, "--taskbroker.tls.enabled=true", "--taskbroker.fail-fast=false");
    try {
      Worker worker = ctx.getBean(TaskbrokerWorkers.class).workers().get("mail");
      assertTrue(capture.seen.await(30, TimeUnit.SECONDS), "the client's System.Logger warning never reached Logback");
      assertTrue(capture.first.get().getFormattedMessage().startsWith("taskbroker worker: "), capture.first.get().getFormattedMessage());
      assertTrue(worker.isRunning(), "without fail-fast the worker keeps retrying");
    } finally {
      ctx.close();
    }
  }
}
