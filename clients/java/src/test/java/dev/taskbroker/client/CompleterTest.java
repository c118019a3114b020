package dev.taskbroker.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.LeaseRequest;
import dev.taskbroker.v1.LeasedTask;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.opentelemetry.api.metrics.MeterProvider;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The completer against FakeBroker: a Complete alone when nothing is in flight, the ones queued
 * behind it as one CompleteMany, and each completion's own answer.
 */
class CompleterTest {
  private FakeBroker fake;
  private ExecutorService sender;
  private ExecutorService callers;
  private Completer completer;

  @BeforeEach
  void setUp() throws Exception {
    fake = new FakeBroker();
    sender = Executors.newSingleThreadExecutor();
    callers = Executors.newCachedThreadPool();
    completer =
        new Completer(fake.taskbroker().broker(), () -> new WorkerMetrics(MeterProvider.noop()), sender);
  }

  @AfterEach
  void tearDown() {
    fake.holdCompletes.countDown();
    callers.shutdownNow();
    sender.shutdownNow();
    fake.close();
  }

  private static void until(BooleanSupplier cond) throws InterruptedException {
    long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
    while (!cond.getAsBoolean()) {
      if (System.nanoTime() > end) {
        throw new AssertionError("condition not met in time");
      }
      Thread.sleep(5);
    }
  }

  private static CompleteRequest req(String id, boolean leaseNext) {
    CompleteRequest.Builder r =
        CompleteRequest.newBuilder()
            .setTaskId(id)
            .setLeaseToken("tok-" + id)
            .setResult(ByteString.copyFromUtf8("r-" + id));
    if (leaseNext) {
      r.setLeaseNext(LeaseRequest.newBuilder().setWorkerId("w1").addQueues("q").setMaxTasks(1));
    }
    return r.build();
  }

  private CompletableFuture<List<LeasedTask>> complete(CompleteRequest r) {
    return CompletableFuture.supplyAsync(() -> completer.complete(r), callers);
  }

  /** One Complete held in flight by the broker, then {@code ids} queued behind it. */
  private List<CompletableFuture<List<LeasedTask>>> queueBehindOne(List<String> ids, boolean leaseNext)
      throws Exception {
    fake.holdCompletes = new CountDownLatch(1);
    List<CompletableFuture<List<LeasedTask>>> all = new ArrayList<>();
    all.add(complete(req("first", leaseNext)));
    until(() -> fake.completesArrived.get() == 1);
    for (String id : ids) {
      all.add(complete(req(id, leaseNext)));
    }
    until(() -> completer.queued() == ids.size());
    fake.holdCompletes.countDown();
    return all;
  }

  @Test
  void aLoneCompleteIsSentAtOnceAsAPlainComplete() {
    assertEquals(List.of(), completer.complete(req("a", false)));
    assertEquals(1, fake.completeCalls.size());
    assertEquals(0, fake.completeManys.size());
  }

  @Test
  void completionsQueuedBehindTheCallInFlightGoAsOneCompleteMany() throws Exception {
    for (CompletableFuture<List<LeasedTask>> f : queueBehindOne(List.of("b", "c", "d"), false)) {
      assertEquals(List.of(), f.get(5, TimeUnit.SECONDS));
    }
    assertEquals(List.of("first"), fake.completeCalls.stream().map(CompleteRequest::getTaskId).toList());
    assertEquals(1, fake.completeManys.size());
    assertEquals(
        List.of("b", "c", "d"),
        fake.completeManys.get(0).getCompletionsList().stream().map(CompleteRequest::getTaskId).sorted().toList());
    for (CompleteRequest c : fake.completeManys.get(0).getCompletionsList()) {
      assertEquals("r-" + c.getTaskId(), c.getResult().toStringUtf8());
    }
  }

  @Test
  void aLostLeaseInABatchIsThatCompletionsOwnLeaseLost() throws Exception {
    fake.lostIds.add("c");
    List<CompletableFuture<List<LeasedTask>>> all = queueBehindOne(List.of("b", "c", "d"), false);
    all.get(1).get(5, TimeUnit.SECONDS);
    all.get(3).get(5, TimeUnit.SECONDS);
    var e = org.junit.jupiter.api.Assertions.assertThrows(
        java.util.concurrent.ExecutionException.class, () -> all.get(2).get(5, TimeUnit.SECONDS));
    assertTrue(ErrorDetails.isLeaseLost(e.getCause()), "want LEASE_LOST, got " + e.getCause());
  }

  @Test
  void aBatchRefusedAsAWholeIsSentAgainOneCompleteEach() throws Exception {
    fake.completeManyError = Status.INVALID_ARGUMENT.withDescription("completions[1].result: too large");
    for (CompletableFuture<List<LeasedTask>> f : queueBehindOne(List.of("b", "c"), false)) {
      f.get(5, TimeUnit.SECONDS);
    }
    assertEquals(1, fake.completeManys.size());
    assertEquals(
        List.of("b", "c", "first"),
        fake.completeCalls.stream().map(CompleteRequest::getTaskId).sorted().toList());
  }

  @Test
  void aBatchThatMeetsAnUnreachableBrokerGivesEachCompletionThatError() throws Exception {
    fake.completeManyError = Status.UNAVAILABLE.withDescription("connection refused");
    List<CompletableFuture<List<LeasedTask>>> all = queueBehindOne(List.of("b", "c"), false);
    all.get(0).get(5, TimeUnit.SECONDS);
    for (CompletableFuture<List<LeasedTask>> f : all.subList(1, 3)) {
      var e = org.junit.jupiter.api.Assertions.assertThrows(
          java.util.concurrent.ExecutionException.class, () -> f.get(5, TimeUnit.SECONDS));
      assertEquals(Status.Code.UNAVAILABLE, ((StatusRuntimeException) e.getCause()).getStatus().getCode());
    }
    assertEquals(1, fake.completeCalls.size()); // not sent again here: the worker's settle retries do that
  }

  @Test
  void aBatchLeasesOneNextTaskPerAskingCompletionInOrder() throws Exception {
    for (String p : List.of("n1", "n2", "n3", "n4")) {
      fake.add(p);
    }
    fake.holdCompletes = new CountDownLatch(1);
    CompletableFuture<List<LeasedTask>> first = complete(req("first", false));
    until(() -> fake.completesArrived.get() == 1);
    CompletableFuture<List<LeasedTask>> b = complete(req("b", true));
    until(() -> completer.queued() == 1);
    CompletableFuture<List<LeasedTask>> c = complete(req("c", false));
    until(() -> completer.queued() == 2);
    CompletableFuture<List<LeasedTask>> d = complete(req("d", true));
    until(() -> completer.queued() == 3);
    fake.holdCompletes.countDown();
    assertEquals(List.of(), first.get(5, TimeUnit.SECONDS));
    assertEquals(List.of("n1"), payloads(b.get(5, TimeUnit.SECONDS)));
    assertEquals(List.of(), c.get(5, TimeUnit.SECONDS));
    assertEquals(List.of("n2"), payloads(d.get(5, TimeUnit.SECONDS)));
    assertEquals(2, fake.completeManys.get(0).getLeaseNext().getMaxTasks());
    assertFalse(fake.completeManys.get(0).getCompletions(0).hasLeaseNext());
  }

  private static List<String> payloads(List<LeasedTask> tasks) {
    return tasks.stream().map(t -> t.getPayload().toStringUtf8()).toList();
  }

  @Test
  void outcomesMapToTheErrorsCompleteGives() {
    var lost = Completer.outcome("t", dev.taskbroker.v1.CompleteResult.newBuilder()
        .setOutcome(dev.taskbroker.v1.CompleteOutcome.COMPLETE_OUTCOME_LEASE_LOST).build());
    assertTrue(ErrorDetails.isLeaseLost(lost));
    var missing = Completer.outcome("t", dev.taskbroker.v1.CompleteResult.newBuilder()
        .setOutcome(dev.taskbroker.v1.CompleteOutcome.COMPLETE_OUTCOME_NOT_FOUND).build());
    assertEquals(Status.Code.NOT_FOUND, missing.getStatus().getCode());
    assertFalse(ErrorDetails.isLeaseLost(missing));
    assertEquals(null, Completer.outcome("t", dev.taskbroker.v1.CompleteResult.newBuilder()
        .setOutcome(dev.taskbroker.v1.CompleteOutcome.COMPLETE_OUTCOME_COMPLETED).build()));
  }
}
