package dev.taskbroker.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.taskbroker.v1.FailRequest;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The Worker under faults (docs/client-spec.md point 11) against FakeBroker: settles retried
 * across an outage, the stop bound and hand-back, the local clock flagging an expired lease,
 * Errors failing the task, and the logging rule.
 */
class FaultsTest {
  private FakeBroker fake;
  private final List<LogRecord> records = new CopyOnWriteArrayList<>();
  private final Logger jul = Logger.getLogger(Worker.class.getName());
  private final Handler capture =
      new Handler() {
        @Override
        public void publish(LogRecord r) {
          records.add(r);
        }

        @Override
        public void flush() {}

        @Override
        public void close() {}
      };

  @BeforeEach
  void setUp() throws Exception {
    fake = new FakeBroker();
    jul.addHandler(capture);
  }

  @AfterEach
  void tearDown() {
    jul.removeHandler(capture);
    fake.close();
  }

  private Worker.Builder worker(TaskHandler handler) {
    return Worker.builder(fake.taskbroker(), handler)
        .queues("q")
        .workerId("w1")
        .pollWait(Duration.ofSeconds(1))
        .onError((during, e) -> {});
  }

  private static void until(BooleanSupplier cond, int seconds) throws InterruptedException {
    long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
    while (!cond.getAsBoolean()) {
      if (System.nanoTime() > end) {
        throw new AssertionError("condition not met in time");
      }
      Thread.sleep(10);
    }
  }

  private long lines(Level level, String text) {
    return records.stream()
        .filter(r -> r.getLevel().equals(level) && r.getMessage().contains(text))
        .count();
  }

  @Test
  void aCompleteIsRetriedAcrossAnOutageLongerThanFiveTries() throws Exception {
    String id = fake.add("x");
    fake.unavailableCompletes.set(6);
    Worker w = worker(ctx -> "done".getBytes()).build();
    w.start();
    until(() -> fake.completes.size() == 1, 25);
    w.stop(Duration.ofSeconds(1));
    assertEquals(id, fake.completes.get(0).getTaskId());
    assertTrue(lines(Level.WARNING, "connection refused") > 0, "retries are logged with their cause");
  }

  @Test
  void stopHandsBackATaskWhoseHandlerIgnoresItsInterrupt() throws Exception {
    String id = fake.add("x");
    CountDownLatch started = new CountDownLatch(1);
    CountDownLatch latch = new CountDownLatch(1);
    Worker w =
        worker(
                ctx -> {
                  started.countDown();
                  while (true) {
                    try {
                      latch.await();
                      return "late".getBytes();
                    } catch (InterruptedException e) {
                      // ignores its cancellation
                    }
                  }
                })
            .stopTimeout(Duration.ofMillis(500))
            .stopGrace(Duration.ofMillis(500))
            .build();
    w.start();
    started.await();
    assertTimeoutPreemptively(Duration.ofSeconds(20), w::close);
    assertEquals(1, fake.fails.size());
    FailRequest f = fake.fails.get(0);
    assertEquals(id, f.getTaskId());
    assertFalse(f.getNonRetryable());
    assertTrue(f.hasRetryAfter() && f.getRetryAfter().getSeconds() == 0 && f.getRetryAfter().getNanos() == 0);
    assertEquals(1, lines(Level.WARNING, id));
    latch.countDown();
  }

  @Test
  void stopReturnsWhenTheBrokerFreezesDuringTheHandBack() throws Exception {
    fake.add("x");
    CountDownLatch started = new CountDownLatch(1);
    CountDownLatch latch = new CountDownLatch(1);
    Worker w =
        worker(
                ctx -> {
                  started.countDown();
                  while (true) {
                    try {
                      latch.await();
                      return null;
                    } catch (InterruptedException e) {
                      // ignores its cancellation
                    }
                  }
                })
            .stopTimeout(Duration.ofMillis(200))
            .build();
    w.start();
    started.await();
    fake.frozen = true;
    assertTimeoutPreemptively(Duration.ofSeconds(8), w::close);
    latch.countDown();
  }

  @Test
  void theLocalClockFlagsAndInterruptsAHandlerWhoseLeaseExpired() throws Exception {
    String id = fake.add("x");
    fake.leaseLength = Duration.ofSeconds(1);
    fake.frozen = true; // heartbeats go unanswered
    AtomicReference<TaskContext.AbortKind> kind = new AtomicReference<>();
    CountDownLatch seen = new CountDownLatch(1);
    Worker w =
        worker(
                ctx -> {
                  try {
                    Thread.sleep(20_000);
                  } catch (InterruptedException e) {
                    kind.set(ctx.abortKind().orElse(null));
                  }
                  seen.countDown();
                  return "late".getBytes();
                })
            .leaseDuration(Duration.ofSeconds(30))
            .build();
    w.start();
    assertTrue(seen.await(25, TimeUnit.SECONDS));
    fake.frozen = false;
    w.stop(Duration.ofSeconds(1));
    assertEquals(TaskContext.AbortKind.LOST, kind.get());
    assertEquals(0, fake.completes.size(), "an expired lease is never settled");
    assertEquals(1, lines(Level.WARNING, id));
  }

  @Test
  void aStackOverflowFailsTheTaskWithItsCauseAndIsLoggedWithItsStack() throws Exception {
    String id = fake.add("x");
    Worker w = worker(ctx -> recurse(0)).build();
    w.start();
    until(() -> fake.fails.size() == 1, 10);
    w.stop(Duration.ofSeconds(1));
    assertEquals(id, fake.fails.get(0).getTaskId());
    assertTrue(fake.fails.get(0).getErrorMessage().contains("StackOverflowError"), fake.fails.get(0).getErrorMessage());
    LogRecord r =
        records.stream().filter(x -> x.getLevel().equals(Level.SEVERE) && x.getMessage().contains(id)).findFirst().orElseThrow();
    assertTrue(r.getThrown() instanceof StackOverflowError);
  }

  @Test
  void plannedRetriesAndPermanentFailuresAreOneWarningLineUnexpectedOnesAnErrorWithTheStack()
      throws Exception {
    String planned = fake.add("retry", 1, 3);
    String last = fake.add("retry", 3, 3);
    String perm = fake.add("perm", 1, 3);
    String other = fake.add("other", 1, 3);
    Worker w =
        worker(
                ctx -> {
                  switch (ctx.payload().toStringUtf8()) {
                    case "retry" -> throw new RetryableException("backend busy");
                    case "perm" -> throw new PermanentException("no such order");
                    default -> throw new IllegalStateException("surprise");
                  }
                })
            .concurrency(4)
            .build();
    w.start();
    until(() -> fake.fails.size() == 4, 10);
    w.stop(Duration.ofSeconds(1));
    String prefix = "taskbroker worker: task ";
    assertEquals(
        List.of(prefix + planned + ": attempt 1 of 3 failed, the task will be retried: backend busy"),
        about(planned, Level.WARNING));
    assertEquals(
        List.of(prefix + last + ": attempt 3 of 3 failed, the task goes DEAD: backend busy"),
        about(last, Level.WARNING));
    assertEquals(
        List.of(prefix + perm + ": failed permanently, the task goes DEAD: no such order"),
        about(perm, Level.WARNING));
    for (String id : List.of(planned, last, perm)) {
      assertEquals(List.of(), about(id, Level.SEVERE), id);
      assertTrue(
          records.stream()
              .filter(r -> r.getMessage().contains(id))
              .allMatch(r -> r.getThrown() == null),
          "a stack for " + id);
    }
    List<LogRecord> errors =
        records.stream()
            .filter(r -> r.getLevel().equals(Level.SEVERE) && r.getMessage().contains(other))
            .toList();
    assertEquals(1, errors.size());
    assertEquals(
        prefix + other + ": handler threw java.lang.IllegalStateException: surprise",
        errors.get(0).getMessage());
    assertTrue(errors.get(0).getThrown() instanceof IllegalStateException);
    assertEquals(List.of(), about(other, Level.WARNING));
  }

  private List<String> about(String id, Level level) {
    return records.stream()
        .filter(r -> r.getLevel().equals(level) && r.getMessage().contains("task " + id + ":"))
        .map(LogRecord::getMessage)
        .toList();
  }

  private static byte[] recurse(int n) {
    return n < 0 ? null : recurse(n + 1);
  }

  @Test
  void aConnectionErrorIsLoggedByItsCause() {
    Throwable e =
        io.grpc.Status.UNAVAILABLE
            .withDescription("io exception")
            .withCause(new java.io.IOException("wrapper", new java.net.ConnectException("Connection refused")))
            .asRuntimeException();
    assertEquals("UNAVAILABLE: Connection refused", ErrorDetails.plain(e));
  }
}
