package dev.taskbroker.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.taskbroker.v1.GetTaskRequest;
import dev.taskbroker.v1.RetryPolicy;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskState;
import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.ThreadLocalRandom;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * The policy declared with a handler and {@link TaskDef} (docs/client-spec.md point 20): the
 * merge and the exception match here, the rest against the live broker at {@code
 * TASKBROKER_ADDR} (skipped without it).
 */
class HandlerPolicyTest {
  private Taskbroker tb;

  static final class InvalidAddressException extends RuntimeException {
    InvalidAddressException(String m) {
      super(m);
    }
  }

  public record Email(String to) {}

  public record Sent(String to, int attempt) {}

  @AfterEach
  void tearDown() {
    if (tb != null) {
      tb.close();
    }
  }

  private String live() {
    String addr = System.getenv("TASKBROKER_ADDR");
    Assumptions.assumeTrue(addr != null && !addr.isEmpty(), "TASKBROKER_ADDR is not set");
    tb = Taskbroker.fromEnv(addr);
    return "test.java.policy." + Integer.toHexString(ThreadLocalRandom.current().nextInt());
  }

  private Task get(String id) {
    return tb.admin().getTask(GetTaskRequest.newBuilder().setTaskId(id).build()).getTask();
  }

  @Test
  void onlyTheUnsetFieldsAreFilledAndCausesAreMatched() {
    HandlerPolicy p =
        HandlerPolicy.builder()
            .maxAttempts(7)
            .backoff(Duration.ofSeconds(2))
            .nonRetryable(InvalidAddressException.class)
            .build();
    RetryPolicy merged = HandlerPolicy.merge(RetryPolicy.newBuilder().setMaxAttempts(2).build(), p.retry());
    assertEquals(2, merged.getMaxAttempts());
    assertEquals(2, merged.getInitialBackoff().getSeconds());
    assertFalse(merged.hasMaxBackoff());
    assertTrue(p.isNonRetryable(new RuntimeException("send", new InvalidAddressException("no @"))));
    assertFalse(p.isNonRetryable(new IllegalStateException("x")));
  }

  @Test
  void theHandlersRetryDefaultsReachTheBroker() {
    String q = live();
    Worker.builder(tb)
        .handle(q, Email.class, (task, e) -> null)
        .policy(q, HandlerPolicy.builder().maxAttempts(7).backoff(Duration.ofSeconds(42)).build())
        .build();
    Task plain = get(tb.submit(q, new Email("a")).getTaskId());
    assertEquals(7, plain.getMaxAttempts());
    assertEquals(42, plain.getRetry().getInitialBackoff().getSeconds());
    Task own =
        get(
            tb.submit(tb.spec(q, new Email("b")).setRetry(RetryPolicy.newBuilder().setMaxAttempts(2)).build())
                .getTaskId());
    assertEquals(2, own.getMaxAttempts(), "the spec's own field wins");
    assertEquals(42, own.getRetry().getInitialBackoff().getSeconds());
    assertEquals(3, get(tb.submit(q + ".other", new Email("c")).getTaskId()).getMaxAttempts());
  }

  @Test
  void aNonRetryableExceptionEndsTheTaskDeadAtAttemptOne() {
    String q = live();
    TaskDef<Email, Sent> emails =
        TaskDef.of(q, Email.class, Sent.class)
            .withPolicy(
                HandlerPolicy.builder().maxAttempts(5).nonRetryable(InvalidAddressException.class).build());
    Worker w =
        Worker.builder(tb)
            .pollWait(Duration.ofSeconds(1))
            .task(
                emails,
                (task, e) -> {
                  if (e.to().isEmpty()) {
                    throw new IllegalStateException("send failed", new InvalidAddressException("no recipient"));
                  }
                  return new Sent(e.to(), task.attempt());
                })
            .build();
    w.start();
    try {
      assertEquals(new Sent("ada", 1), emails.submitAndWait(tb, new Email("ada"), Duration.ofSeconds(30)));
      TaskFailedException failed =
          assertThrows(
              TaskFailedException.class,
              () -> emails.submitAndWait(tb, new Email(""), Duration.ofSeconds(30)));
      assertEquals(TaskState.TASK_STATE_DEAD, failed.state());
      assertEquals(1, failed.task().getAttempt());
      assertEquals(5, failed.task().getMaxAttempts());
    } finally {
      w.close();
    }
    Task later = get(emails.submitIn(tb, new Email("x"), Duration.ofHours(1)).getTaskId());
    assertEquals(TaskState.TASK_STATE_SCHEDULED, later.getState());
    assertEquals(5, later.getMaxAttempts());
    Instant at = Instant.now().plusSeconds(7200);
    Task fixed = get(emails.submitAt(tb, new Email("y"), at).getTaskId());
    assertEquals(at.getEpochSecond(), fixed.getRunAt().getSeconds());
  }

  @Test
  void aQueueWithItsOwnConcurrencyHoldsThatManyLeases() throws Exception {
    String q = live();
    java.util.List<String> ids = new java.util.ArrayList<>();
    for (int i = 0; i < 3; i++) { // waiting before the worker starts: 4 shared slots would lease all
      ids.add(tb.submit(q, i).getTaskId());
    }
    java.util.concurrent.CountDownLatch first = new java.util.concurrent.CountDownLatch(1);
    java.util.concurrent.CountDownLatch gate = new java.util.concurrent.CountDownLatch(1);
    java.util.concurrent.atomic.AtomicInteger running = new java.util.concurrent.atomic.AtomicInteger();
    java.util.concurrent.atomic.AtomicInteger peak = new java.util.concurrent.atomic.AtomicInteger();
    Worker w =
        Worker.builder(tb)
            .concurrency(4)
            .pollWait(Duration.ofSeconds(1))
            .handle(
                q,
                Integer.class,
                (task, i) -> {
                  peak.accumulateAndGet(running.incrementAndGet(), Math::max);
                  first.countDown();
                  gate.await();
                  running.decrementAndGet();
                  return i;
                })
            .policy(q, HandlerPolicy.builder().concurrency(1).build())
            .build();
    w.start();
    try {
      assertTrue(first.await(30, java.util.concurrent.TimeUnit.SECONDS));
      long leased = ids.stream().filter(id -> get(id).getState() == TaskState.TASK_STATE_LEASED).count();
      assertEquals(1, leased, "one slot: one lease");
      gate.countDown();
      for (String id : ids) {
        tb.waitFor(id, Duration.ofSeconds(30));
      }
      assertEquals(1, peak.get());
    } finally {
      w.close();
    }
  }
}
