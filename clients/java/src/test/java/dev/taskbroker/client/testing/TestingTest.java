package dev.taskbroker.client.testing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.taskbroker.client.CooldownInfo;
import dev.taskbroker.client.PermanentException;
import dev.taskbroker.client.RetryableException;
import dev.taskbroker.client.TaskContext;
import dev.taskbroker.client.TaskFailedException;
import dev.taskbroker.client.TypedHandler;
import dev.taskbroker.client.WaitTimeoutException;
import dev.taskbroker.v1.RetryPolicy;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskState;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

/** The testing package: a handler on a TestTaskContext, a producer and a worker on an InMemoryBroker, no broker. */
class TestingTest {
  record Import(int rows) {}

  record Imported(int rows, int resumedFrom) {}

  /** Checkpoints after every row and resumes from the last checkpoint. */
  static final TypedHandler<Import, Imported> IMPORT =
      (ctx, job) -> {
        int done =
            ctx.lastCheckpoint().map(c -> Integer.parseInt(c.toStringUtf8())).orElse(0);
        if (job.rows() < 0) {
          throw new PermanentException("negative row count");
        }
        for (int row = done; row < job.rows(); row++) {
          if (ctx.isCancelled()) {
            throw new RetryableException("cancelled", Duration.ZERO, null);
          }
          ctx.checkpoint(String.valueOf(row + 1).getBytes(StandardCharsets.UTF_8));
        }
        if (ctx.task().getMetadataMap().containsKey("flaky") && ctx.attempt() < 2) {
          throw new RetryableException("upstream busy", Duration.ofSeconds(5), null);
        }
        return new Imported(job.rows(), done);
      };

  private static List<String> strings(List<byte[]> bytes) {
    return bytes.stream().map(b -> new String(b, StandardCharsets.UTF_8)).collect(Collectors.toList());
  }

  @Test
  void aHandlerRunsOnATestTaskContextWithNoBroker() throws Exception {
    TestTaskContext t =
        TestTaskContext.builder("imports", new Import(3))
            .attempt(2)
            .checkpoint("1".getBytes(StandardCharsets.UTF_8))
            .metadata("tenant", "a")
            .build();
    TaskContext ctx = t.context();
    assertEquals(2, ctx.attempt());
    assertEquals("imports", ctx.queue());
    assertEquals("a", ctx.task().getMetadataMap().get("tenant"));
    Outcome out = t.run(Import.class, IMPORT);
    assertTrue(out.succeeded(), out.toString());
    assertEquals(new Imported(3, 1), out.value());
    assertEquals(new Imported(3, 1), out.result(Imported.class));
    assertEquals(List.of("2", "3"), strings(t.checkpoints()));
    assertEquals(2, t.cancelChecks());
    assertEquals(out, t.outcome());

    Outcome flaky =
        TestTaskContext.builder("imports", new Import(1)).metadata("flaky", "1").build().run(Import.class, IMPORT);
    assertTrue(flaky.retryable());
    assertEquals(Duration.ofSeconds(5), flaky.retryAfter().orElseThrow());
    assertEquals("upstream busy", flaky.errorMessage());

    Outcome bad = TestTaskContext.of("imports", new Import(-1)).run(Import.class, IMPORT);
    assertTrue(bad.permanent());
    assertInstanceOf(PermanentException.class, bad.error());
    assertTrue(
        TestTaskContext.of("imports", "not json".getBytes(StandardCharsets.UTF_8)).run(Import.class, IMPORT).permanent(),
        "a payload that does not decode fails for good");

    // An operator's cancel arrives in a checkpoint's answer.
    TestTaskContext cancelled = TestTaskContext.builder("imports", new Import(5)).cancelAtCheckpoint(2).build();
    assertTrue(cancelled.run(Import.class, IMPORT).retryable());
    assertEquals(TaskContext.AbortKind.CANCELLED, cancelled.context().abortKind().orElseThrow());
    assertEquals(2, cancelled.checkpoints().size());

    TestTaskContext lost = TestTaskContext.builder("imports", new Import(5)).loseLeaseAtCheckpoint(1).build();
    Outcome l = lost.run(Import.class, IMPORT);
    assertTrue(l.leaseLost());
    assertInstanceOf(TaskContext.CancelledException.class, l.error());
    assertTrue(lost.checkpoints().isEmpty());

    // After a hard stop the failure hands the task back: retried at once.
    TestTaskContext stopping = TestTaskContext.of("imports", new Import(5));
    stopping.cancel(TaskContext.AbortKind.STOPPING);
    Outcome s = stopping.run(Import.class, IMPORT);
    assertTrue(s.retryable());
    assertEquals(Duration.ZERO, s.retryAfter().orElseThrow());
    Thread.interrupted();

    // Called directly, the handler throws what it throws under the worker.
    assertThrows(PermanentException.class, () -> IMPORT.handle(TestTaskContext.of("imports", null).context(), new Import(-1)));

    // A raw handler inside middleware; an unexpected exception is retryable.
    List<String> seen = new ArrayList<>();
    TestTaskContext raw = TestTaskContext.builder("raw", "hi".getBytes(StandardCharsets.UTF_8)).taskId("t-1").build();
    Outcome r =
        raw.run(
            c -> c.payload().toStringUtf8().toUpperCase().getBytes(StandardCharsets.UTF_8),
            (task, next) -> {
              seen.add(task.taskId());
              return next.proceed();
            });
    assertEquals("HI", new String(r.result(), StandardCharsets.UTF_8));
    assertEquals(List.of("t-1"), seen);
    Outcome boom = TestTaskContext.of("x", null).run(c -> {
      throw new IllegalStateException("boom");
    });
    assertTrue(boom.retryable());
    assertFalse(boom.succeeded());
  }

  @Test
  void aProducerAndAWorkerRunOnTheInMemoryBroker() {
    InMemoryBroker tb = new InMemoryBroker().handle("imports", Import.class, IMPORT);

    // Attempt 1 checkpoints both rows and fails; attempt 2 resumes from its checkpoint.
    Task task =
        tb.submitAndWait(tb.spec("imports", new Import(2)).putMetadata("flaky", "1").build(), Duration.ofSeconds(1));
    assertEquals(TaskState.TASK_STATE_SUCCEEDED, task.getState());
    assertEquals(2, task.getAttempt());
    assertEquals(new Imported(2, 2), tb.result(task, Imported.class));
    assertEquals(List.of(true, false), tb.outcomes(task.getId()).stream().map(Outcome::retryable).toList());

    // A permanent error: one attempt, DEAD; waitFor throws TaskFailedException.
    String dead = tb.submit("imports", new Import(-1)).getTaskId();
    TaskFailedException e = assertThrows(TaskFailedException.class, () -> tb.waitFor(dead, Duration.ofSeconds(1)));
    assertEquals("negative row count", e.lastError());
    assertEquals(1, tb.getTask(dead).getAttempt());

    // Retryable failures until max_attempts.
    tb.handle("down", ctx -> {
      throw new IllegalStateException("unreachable");
    });
    String down =
        tb.submit(tb.spec("down", null).setRetry(RetryPolicy.newBuilder().setMaxAttempts(4)).build()).getTaskId();
    Task d = tb.waitForAll(List.of(down), Duration.ofSeconds(1)).get(0);
    assertEquals(TaskState.TASK_STATE_DEAD, d.getState());
    assertEquals(4, d.getAttempt());

    // Keys deduplicate; a queue with no handler waits until one is registered.
    var a = tb.submit(tb.spec("imports", new Import(0)).setKey("k").build());
    var b = tb.submit(tb.spec("imports", new Import(0)).setKey("k").build());
    assertTrue(b.getDeduplicated());
    assertEquals(a.getTaskId(), b.getTaskId());
    String later = tb.submit("later", "x".getBytes(StandardCharsets.UTF_8)).getTaskId();
    assertThrows(WaitTimeoutException.class, () -> tb.waitFor(later, Duration.ofMillis(10)));
    tb.handle("later", ctx -> ctx.payload().toStringUtf8().toUpperCase().getBytes(StandardCharsets.UTF_8));
    assertEquals(1, tb.runPending());
    assertEquals("X", tb.waitFor(later, Duration.ofSeconds(1)).getResult().toStringUtf8());
  }

  @Test
  void aSubmittedCheckpointIsTheFirstAttemptsCheckpoint() {
    InMemoryBroker tb = new InMemoryBroker();
    tb.handle("seeded", ctx -> ctx.lastCheckpoint().map(c -> c.toByteArray()).orElse("none".getBytes(StandardCharsets.UTF_8)));
    Task seeded =
        tb.submitAndWait(
            tb.spec("seeded", null).setCheckpoint(com.google.protobuf.ByteString.copyFromUtf8("row=7")).build(),
            Duration.ofSeconds(1));
    assertEquals(1, seeded.getAttempt());
    assertEquals("row=7", seeded.getResult().toStringUtf8());
    Task plain = tb.submitAndWait(tb.spec("seeded", null).build(), Duration.ofSeconds(1));
    assertEquals("none", plain.getResult().toStringUtf8());
  }

  @Test
  void aTestTaskContextRecordsTheCooldownAFailingHandlerAsksFor() throws Exception {
    TypedHandler<String, String> callPartner =
        (ctx, data) -> {
          if ("bucket".equals(data)) {
            throw new RetryableException("429 from the partner").coolDownBucket(Duration.ofSeconds(30));
          }
          throw new RetryableException("429 Too Many Requests", Duration.ofSeconds(1), null)
              .coolDownKey(Duration.ofSeconds(90));
        };
    Outcome key = TestTaskContext.builder("calls", "key").key("acme").build().run(String.class, callPartner);
    assertTrue(key.retryable());
    assertEquals(
        new RetryableException.Cooldown(CooldownInfo.Scope.CONCURRENCY_KEY, Duration.ofSeconds(90)),
        key.cooldown().orElseThrow());
    assertEquals(Duration.ofSeconds(1), key.retryAfter().orElseThrow());
    Outcome bucket = TestTaskContext.of("calls", "bucket").run(String.class, callPartner);
    assertEquals(
        new RetryableException.Cooldown(CooldownInfo.Scope.BUCKET, Duration.ofSeconds(30)),
        bucket.cooldown().orElseThrow());
    assertEquals(CooldownInfo.Scope.BUCKET.proto(), bucket.failRequest().getCooldown().getScope());

    // Without one, or from a failure that is not a RetryableException, there is none.
    TypedHandler<String, String> busy =
        (ctx, data) -> {
          throw new RetryableException("busy");
        };
    assertTrue(TestTaskContext.of("calls", "x").run(String.class, busy).cooldown().isEmpty());
    TypedHandler<String, String> bad =
        (ctx, data) -> {
          throw new PermanentException("bad input");
        };
    assertTrue(TestTaskContext.of("calls", "x").run(String.class, bad).cooldown().isEmpty());
  }
}
