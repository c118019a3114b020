package dev.taskbroker.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;

import dev.taskbroker.v1.FailRequest;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The Worker against FakeBroker: slot-limited leasing, batched heartbeats, error mapping,
 * checkpoint, cancellation and graceful stop.
 */
class WorkerTest {
  private FakeBroker fake;

  @BeforeEach
  void setUp() throws Exception {
    fake = new FakeBroker();
  }

  @AfterEach
  void tearDown() {
    fake.close();
  }

  private Worker.Builder worker(TaskHandler handler) {
    return Worker.builder(fake.taskbroker(), handler)
        .queues("q")
        .workerId("w1")
        .pollWait(Duration.ofSeconds(1))
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

  private static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  @Test
  void leasesNoMoreTasksThanFreeSlotsAndCompletesEachWithItsResult() throws Exception {
    for (String p : List.of("a", "b", "c", "d", "e")) {
      fake.add(p);
    }
    AtomicInteger running = new AtomicInteger();
    AtomicInteger maxRunning = new AtomicInteger();
    Worker w =
        worker(
                ctx -> {
                  maxRunning.accumulateAndGet(running.incrementAndGet(), Math::max);
                  Thread.sleep(50);
                  running.decrementAndGet();
                  return utf8("done:" + ctx.payload().toStringUtf8());
                })
            .concurrency(2)
            .build();
    w.start();
    until(() -> fake.completes.size() == 5);
    w.stop(Duration.ofSeconds(1));
    assertTrue(maxRunning.get() <= 2, "ran " + maxRunning.get() + " at once");
    assertEquals(2, fake.leases.get(0).getMaxTasks());
    assertTrue(fake.leases.stream().allMatch(l -> l.getMaxTasks() >= 1 && l.getMaxTasks() <= 2));
    assertEquals(
        List.of("done:a", "done:b", "done:c", "done:d", "done:e"),
        fake.completes.stream().map(c -> c.getResult().toStringUtf8()).sorted().toList());
    assertTrue(fake.completes.stream().allMatch(c -> c.getLeaseToken().equals("tok-" + c.getTaskId())));
  }

  @Test
  void mapsPermanentRetryableAndOtherExceptionsToFail() throws Exception {
    String perm = fake.add("perm");
    String retry = fake.add("retry");
    String other = fake.add("other");
    Worker w =
        worker(
                ctx -> {
                  switch (ctx.payload().toStringUtf8()) {
                    case "perm" -> throw new PermanentException("bad input");
                    case "retry" -> throw new RetryableException("later", Duration.ofMillis(2500), null);
                    default -> throw new IllegalStateException("boom");
                  }
                })
            .build();
    w.start();
    until(() -> fake.fails.size() == 3);
    w.stop(Duration.ofSeconds(1));
    Map<String, FailRequest> byId =
        fake.fails.stream().collect(Collectors.toMap(FailRequest::getTaskId, f -> f));
    assertTrue(byId.get(perm).getNonRetryable());
    assertEquals("bad input", byId.get(perm).getErrorMessage());
    assertFalse(byId.get(retry).getNonRetryable());
    assertEquals(2, byId.get(retry).getRetryAfter().getSeconds());
    assertEquals(500_000_000, byId.get(retry).getRetryAfter().getNanos());
    assertFalse(byId.get(other).getNonRetryable());
    assertFalse(byId.get(other).hasRetryAfter());
    assertEquals(0, fake.completes.size());
  }

  @Test
  void heartbeatsAllRunningTasksInOneCallAboutEveryThirdOfTheLease() throws Exception {
    for (String p : List.of("a", "b", "c")) {
      fake.add(p);
    }
    Worker w =
        worker(
                ctx -> {
                  Thread.sleep(1300);
                  return null;
                })
            .concurrency(3)
            .leaseDuration(Duration.ofMillis(1500))
            .build();
    w.start();
    until(() -> fake.completes.size() == 3);
    w.stop(Duration.ofSeconds(1));
    assertTrue(fake.heartbeats.size() >= 2, fake.heartbeats.size() + " heartbeats");
    assertEquals(3, fake.heartbeats.get(0).getLeasesCount());
    assertEquals("w1", fake.heartbeats.get(0).getWorkerId());
    assertEquals(1, fake.heartbeats.get(0).getExtendBy().getSeconds());
    assertEquals(500_000_000, fake.heartbeats.get(0).getExtendBy().getNanos());
  }

  @Test
  void cancelRequestedFlagsTheContextAndTheThrownErrorIsReported() throws Exception {
    String id = fake.add("x");
    fake.cancelIds.add(id);
    AtomicReference<TaskContext.AbortKind> kind = new AtomicReference<>();
    Worker w =
        worker(
                ctx -> {
                  while (!ctx.isCancelled()) {
                    Thread.sleep(10);
                  }
                  kind.set(ctx.abortKind().orElseThrow());
                  ctx.throwIfCancelled();
                  return null;
                })
            .leaseDuration(Duration.ofSeconds(1))
            .build();
    w.start();
    until(() -> fake.fails.size() == 1);
    w.stop(Duration.ofSeconds(1));
    assertEquals(TaskContext.AbortKind.CANCELLED, kind.get());
    assertEquals(id, fake.fails.get(0).getTaskId());
  }

  @Test
  void aLostLeaseFlagsTheContextAndNothingIsReported() throws Exception {
    String id = fake.add("x");
    fake.lostIds.add(id);
    AtomicReference<TaskContext.AbortKind> kind = new AtomicReference<>();
    AtomicReference<Exception> checkpointError = new AtomicReference<>();
    CountDownLatch handled = new CountDownLatch(1);
    Worker w =
        worker(
                ctx -> {
                  while (!ctx.isCancelled()) {
                    try {
                      Thread.sleep(10);
                    } catch (InterruptedException e) {
                      // a lost lease interrupts the handler too
                    }
                  }
                  kind.set(ctx.abortKind().orElseThrow());
                  try {
                    ctx.checkpoint(utf8("late"));
                  } catch (TaskContext.CancelledException e) {
                    checkpointError.set(e);
                  }
                  handled.countDown();
                  return utf8("too late");
                })
            .leaseDuration(Duration.ofSeconds(1))
            .build();
    w.start();
    assertTrue(handled.await(5, TimeUnit.SECONDS));
    w.stop(Duration.ofSeconds(1));
    assertEquals(TaskContext.AbortKind.LOST, kind.get());
    assertTrue(checkpointError.get() != null, "checkpoint after a lost lease did not throw");
    assertEquals(0, fake.completes.size() + fake.fails.size());
  }

  @Test
  void checkpointStoresProgressAndAttemptComesFromTheLease() throws Exception {
    String id = fake.add("x", 3);
    AtomicInteger attempt = new AtomicInteger();
    AtomicReference<String> before = new AtomicReference<>();
    AtomicReference<String> after = new AtomicReference<>();
    Worker w =
        worker(
                ctx -> {
                  attempt.set(ctx.attempt());
                  before.set(ctx.lastCheckpoint().map(b -> b.toStringUtf8()).orElse("none"));
                  ctx.checkpoint(utf8("step-1"));
                  after.set(ctx.lastCheckpoint().map(b -> b.toStringUtf8()).orElse("none"));
                  return null;
                })
            .build();
    w.start();
    until(() -> fake.completes.size() == 1);
    w.stop(Duration.ofSeconds(1));
    assertEquals(3, attempt.get());
    assertEquals("none", before.get());
    assertEquals("step-1", after.get());
    assertEquals("step-1", fake.checkpoints.get(id).toStringUtf8());
  }

  @Test
  void stopEndsTheLongPollAtOnceAndDrainsRunningTasks() throws Exception {
    fake.add("slow");
    AtomicReference<Boolean> finished = new AtomicReference<>(false);
    Worker w =
        worker(
                ctx -> {
                  Thread.sleep(300);
                  finished.set(true);
                  return null;
                })
            .build();
    w.start();
    until(() -> w.inFlight() == 1 && fake.pendingLeases.get() == 1);
    long t0 = System.nanoTime();
    w.stop(Duration.ofSeconds(5));
    long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
    assertTrue(finished.get(), "stop() returned before the task finished");
    assertEquals(1, fake.completes.size());
    assertTrue(tookMs < 1000, "stop() took " + tookMs + " ms");
  }

  @Test
  void stopAfterItsTimeoutFlagsAndInterruptsHandlers() throws Exception {
    fake.add("stuck");
    AtomicReference<TaskContext.AbortKind> kind = new AtomicReference<>();
    Worker w =
        worker(
                ctx -> {
                  try {
                    Thread.sleep(60_000);
                  } finally {
                    kind.set(ctx.abortKind().orElse(null));
                  }
                  return null;
                })
            .build();
    w.start();
    until(() -> w.inFlight() == 1);
    w.stop(Duration.ofMillis(100));
    assertEquals(TaskContext.AbortKind.STOPPING, kind.get());
    assertEquals(1, fake.fails.size());
  }

  @Test
  void closingAWorkerThatNeverStartedReturnsAtOnce() {
    Worker w = worker(ctx -> null).build();
    assertTimeoutPreemptively(Duration.ofSeconds(5), w::close);
    assertTimeoutPreemptively(Duration.ofSeconds(5), () -> w.stop(Duration.ofSeconds(1)));
  }

  @Test
  void sendsItsLabelsWithEveryLease() throws Exception {
    fake.add("a");
    Worker w = worker(ctx -> utf8("ok")).label("gpu", "a100").label("region", "eu").build();
    w.start();
    until(() -> fake.completes.size() == 1);
    w.stop(Duration.ofSeconds(1));
    assertTrue(
        fake.leases.stream()
            .allMatch(l -> l.getLabelsMap().equals(Map.of("gpu", "a100", "region", "eu"))));
  }
}
