package dev.taskbroker.client;

import com.google.protobuf.Any;
import com.google.rpc.Code;
import com.google.rpc.ErrorInfo;
import dev.taskbroker.v1.BrokerServiceGrpc;
import dev.taskbroker.v1.CompleteManyRequest;
import dev.taskbroker.v1.CompleteManyResponse;
import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.CompleteResult;
import dev.taskbroker.v1.LeaseRequest;
import dev.taskbroker.v1.LeasedTask;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;

/**
 * Completions share calls (the rule of client-rs's completer). A completion that finds no settle
 * call in flight is sent at once as a plain Complete, so a lone task is never delayed; while one
 * is in flight the next ones queue, and when it returns everything queued goes as one
 * CompleteMany (at most {@link #MAX_BATCH} completions, {@link #MAX_BATCH_BYTES} of results).
 *
 * <p>Each completion gets the answer its own Complete would have had: LEASE_LOST per item as an
 * ABORTED error with the LEASE_LOST ErrorInfo. A batch that met an unreachable broker
 * (UNAVAILABLE, DEADLINE_EXCEEDED) gives each completion that error, so the worker's settle
 * retries apply to it; a batch the broker refuses as a whole (a result over its size limit, a
 * broker without CompleteMany) is sent again as one Complete per completion, each from its own
 * caller's thread.
 *
 * <p>lease_next: a batch asks once, for as many tasks as its completions asked for, and hands
 * them out in order, one per asking completion.
 */
final class Completer {
  /** Completions per CompleteMany at most (the broker accepts up to 1000). */
  static final int MAX_BATCH = 256;
  /** Result bytes per CompleteMany at most, well under the default 4 MiB message limit. */
  static final int MAX_BATCH_BYTES = 1024 * 1024;

  private static final System.Logger LOG = System.getLogger(Worker.class.getName());
  private static final long CALL_DEADLINE_MS = 10_000;

  private final BrokerServiceGrpc.BrokerServiceBlockingStub broker;
  private final java.util.function.Supplier<WorkerMetrics> metrics;
  /** One thread: the calls it makes are the ones "in flight". */
  private final ExecutorService sender;

  private final Object lock = new Object();
  /** Guarded by lock. */
  private final ArrayDeque<Item> queued = new ArrayDeque<>();
  /** A call is in flight (or about to be); guarded by lock. */
  private boolean busy;

  /** The answer for one completion: the tasks leased for its slot, an error, or "send alone". */
  private record Answer(List<LeasedTask> next, StatusRuntimeException error, boolean alone) {
    static final Answer ALONE = new Answer(List.of(), null, true);

    static Answer of(List<LeasedTask> next) {
      return new Answer(next, null, false);
    }

    static Answer failed(StatusRuntimeException e) {
      return new Answer(List.of(), e, false);
    }
  }

  private record Item(CompleteRequest req, CompletableFuture<Answer> answer) {}

  Completer(
      BrokerServiceGrpc.BrokerServiceBlockingStub broker,
      java.util.function.Supplier<WorkerMetrics> metrics,
      ExecutorService sender) {
    this.broker = broker;
    this.metrics = metrics;
    this.sender = sender;
  }

  /** Completions waiting behind the call in flight. */
  int queued() {
    synchronized (lock) {
      return queued.size();
    }
  }

  /**
   * Completes one task, as Complete would: returns the tasks leased for its slot (lease_next) or
   * throws the error Complete would have thrown.
   */
  List<LeasedTask> complete(CompleteRequest req) {
    Item item = new Item(req, new CompletableFuture<>());
    boolean lead;
    synchronized (lock) {
      lead = !busy;
      if (lead) {
        busy = true;
      } else {
        queued.add(item);
      }
    }
    if (lead) {
      try {
        sender.execute(() -> drive(List.of(item)));
      } catch (RejectedExecutionException e) {
        // The worker is gone: nothing will send the queue; each sends its own.
        List<Item> left;
        synchronized (lock) {
          busy = false;
          left = new ArrayList<>(queued);
          queued.clear();
        }
        left.forEach(i -> i.answer.complete(Answer.ALONE));
        return alone(req);
      }
    }
    Answer a;
    try {
      a = item.answer.get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw Status.CANCELLED.withDescription("interrupted while completing").asRuntimeException();
    } catch (ExecutionException e) {
      throw Status.INTERNAL.withDescription("completer: " + e.getCause()).asRuntimeException();
    }
    if (a.alone()) {
      return alone(req);
    }
    if (a.error() != null) {
      throw a.error();
    }
    return a.next();
  }

  /** A plain Complete from the caller's thread. */
  private List<LeasedTask> alone(CompleteRequest req) {
    metrics.get().settleCall("Complete");
    return broker
        .withDeadlineAfter(CALL_DEADLINE_MS, TimeUnit.MILLISECONDS)
        .complete(req)
        .getNextTasksList();
  }

  /** Sends {@code batch}, then whatever queued meanwhile, until nothing is queued. */
  private void drive(List<Item> batch) {
    while (true) {
      try {
        send(batch);
      } catch (RuntimeException | Error e) {
        // Never leave a caller waiting: each sends its own.
        batch.forEach(i -> i.answer.complete(Answer.ALONE));
        LOG.log(System.Logger.Level.ERROR, "taskbroker worker: completer: " + e, e);
      }
      synchronized (lock) {
        if (queued.isEmpty()) {
          busy = false;
          return;
        }
        batch = take();
      }
    }
  }

  /** The next batch from the queue: at least one item, at most the limits. Holds lock. */
  private List<Item> take() {
    List<Item> batch = new ArrayList<>();
    long bytes = 0;
    while (!queued.isEmpty() && batch.size() < MAX_BATCH) {
      long size = queued.peek().req.getResult().size();
      if (!batch.isEmpty() && bytes + size > MAX_BATCH_BYTES) {
        break;
      }
      bytes += size;
      batch.add(queued.poll());
    }
    return batch;
  }

  private void send(List<Item> batch) {
    if (batch.size() == 1) {
      Item item = batch.get(0);
      try {
        metrics.get().settleCall("Complete");
        item.answer.complete(
            Answer.of(
                broker
                    .withDeadlineAfter(CALL_DEADLINE_MS, TimeUnit.MILLISECONDS)
                    .complete(item.req)
                    .getNextTasksList()));
      } catch (StatusRuntimeException e) {
        item.answer.complete(Answer.failed(e));
      }
      return;
    }
    CompleteManyRequest.Builder req = CompleteManyRequest.newBuilder();
    int asking = 0;
    LeaseRequest lease = null;
    for (Item i : batch) {
      if (i.req.hasLeaseNext()) {
        asking++;
        if (lease == null) {
          lease = i.req.getLeaseNext();
        }
      }
      req.addCompletions(i.req.toBuilder().clearLeaseNext());
    }
    if (lease != null) {
      req.setLeaseNext(lease.toBuilder().setMaxTasks(asking));
    }
    CompleteManyResponse res;
    try {
      metrics.get().settleCall("CompleteMany");
      res =
          broker
              .withDeadlineAfter(CALL_DEADLINE_MS, TimeUnit.MILLISECONDS)
              .completeMany(req.build());
    } catch (StatusRuntimeException e) {
      Status.Code code = e.getStatus().getCode();
      if (code == Status.Code.UNAVAILABLE || code == Status.Code.DEADLINE_EXCEEDED) {
        batch.forEach(i -> i.answer.complete(Answer.failed(e)));
      } else {
        // Refused as a whole: each on its own, as Complete.
        batch.forEach(i -> i.answer.complete(Answer.ALONE));
      }
      return;
    }
    Iterator<LeasedTask> next = res.getNextTasksList().iterator();
    if (res.getResultsCount() != batch.size()) {
      next.forEachRemaining(
          t ->
              LOG.log(
                  System.Logger.Level.ERROR,
                  "taskbroker worker: task " + t.getTaskId()
                      + ": a malformed CompleteMany answer; its lease will expire"));
      batch.forEach(i -> i.answer.complete(Answer.ALONE));
      return;
    }
    for (int n = 0; n < batch.size(); n++) {
      Item item = batch.get(n);
      List<LeasedTask> mine =
          item.req.hasLeaseNext() && next.hasNext() ? List.of(next.next()) : List.of();
      CompleteResult r = res.getResults(n);
      StatusRuntimeException error = outcome(item.req.getTaskId(), r);
      // The leased tasks go to the slot even when its own completion failed: none is dropped.
      item.answer.complete(new Answer(mine, error, false));
    }
    next.forEachRemaining(
        t ->
            LOG.log(
                System.Logger.Level.ERROR,
                "taskbroker worker: task " + t.getTaskId()
                    + ": the broker returned more tasks than asked for; its lease will expire"));
  }

  /** The error Complete would have answered for one task of a CompleteMany; null: completed. */
  static StatusRuntimeException outcome(String taskId, CompleteResult r) {
    return switch (r.getOutcome()) {
      case COMPLETE_OUTCOME_COMPLETED -> null;
      case COMPLETE_OUTCOME_LEASE_LOST ->
          StatusProto.toStatusRuntimeException(
              com.google.rpc.Status.newBuilder()
                  .setCode(Code.ABORTED_VALUE)
                  .setMessage("the lease of task " + taskId + " is no longer held")
                  .addDetails(
                      Any.pack(
                          ErrorInfo.newBuilder()
                              .setDomain(ErrorDetails.DOMAIN)
                              .setReason(ErrorDetails.LEASE_LOST)
                              .build()))
                  .build());
      case COMPLETE_OUTCOME_NOT_FOUND ->
          Status.NOT_FOUND.withDescription("task " + taskId + " not found").asRuntimeException();
      default ->
          Status.INTERNAL
              .withDescription("CompleteMany answered no outcome for task " + taskId)
              .asRuntimeException();
    };
  }
}
