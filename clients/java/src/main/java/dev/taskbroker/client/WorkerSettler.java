package dev.taskbroker.client;

import com.google.protobuf.ByteString;
import dev.taskbroker.v1.BrokerServiceGrpc;
import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.FailRequest;
import dev.taskbroker.v1.LeaseRequest;
import dev.taskbroker.v1.LeasedTask;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.BiConsumer;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;

/**
 * How the worker settles a task whose handler has returned: Complete through the completer
 * (which batches) or Fail, with the freed slot's lease_next; retried with backoff while the
 * broker is unreachable, until the lease's expiry is near.
 */
final class WorkerSettler {
  private static final System.Logger LOG = System.getLogger(Worker.class.getName());

  private final BrokerServiceGrpc.BrokerServiceBlockingStub broker;
  private final Completer completer;
  /** The worker's metrics as they are now (they are replaced when it starts). */
  private final Supplier<WorkerMetrics> metrics;
  /** True once a stop's margin ran out: a settle still retried then is abandoned. */
  private final BooleanSupplier abandoned;
  private final BiConsumer<String, Throwable> onError;

  WorkerSettler(
      BrokerServiceGrpc.BrokerServiceBlockingStub broker,
      Completer completer,
      Supplier<WorkerMetrics> metrics,
      BooleanSupplier abandoned,
      BiConsumer<String, Throwable> onError) {
    this.broker = broker;
    this.completer = completer;
    this.metrics = metrics;
    this.abandoned = abandoned;
    this.onError = onError;
  }

  /** What a settle brought: the slot's next tasks, and the outcome when it is not the intended one. */
  record Settled(List<LeasedTask> next, WorkerMetrics.Outcome outcome) {
    static Settled ended(WorkerMetrics.Outcome outcome) {
      return new Settled(List.of(), outcome);
    }
  }

  /**
   * Reports the attempt: Complete (through the completer, which batches) or Fail. Complete and
   * Fail are idempotent for the same lease token, which stays valid across a broker restart: a
   * settle that met an unreachable broker is sent again with backoff until the next try would
   * start within the settle margin of the lease's expiry.
   */
  Settled settle(TaskContext ctx, byte[] result, Throwable error, LeaseRequest next) {
    String call = error == null ? "complete" : "fail";
    for (int failures = 0; ; failures++) {
      try {
        if (error == null) {
          CompleteRequest.Builder req =
              CompleteRequest.newBuilder()
                  .setTaskId(ctx.taskId())
                  .setLeaseToken(ctx.task().getLeaseToken())
                  .setResult(result == null ? ByteString.EMPTY : ByteString.copyFrom(result));
          if (next != null) {
            req.setLeaseNext(next);
          }
          return new Settled(completer.complete(req.build()), null);
        }
        FailRequest.Builder req = WorkerFailures.failRequest(ctx, error).toBuilder();
        if (ctx.abortKind().orElse(null) == TaskContext.AbortKind.STOPPING) {
          req.setRetryAfter(ProtoTime.duration(Duration.ZERO)); // hand back: READY at once
        }
        if (next != null) {
          req.setLeaseNext(next);
        }
        metrics.get().settleCall("Fail");
        return new Settled(
            broker.withDeadlineAfter(10, TimeUnit.SECONDS).fail(req.build()).getNextTasksList(),
            null);
      } catch (StatusRuntimeException e) {
        String id = ctx.taskId();
        if (ErrorDetails.isLeaseLost(e)) {
          LOG.log(
              System.Logger.Level.WARNING,
              "taskbroker worker: task " + id + ": " + call
                  + " refused: lease lost (LEASE_LOST); another attempt may run");
          metrics.get().leaseLost(ctx.queue());
          return Settled.ended(WorkerMetrics.Outcome.LEASE_LOST);
        }
        if (abandoned.getAsBoolean()) {
          LOG.log(
              System.Logger.Level.WARNING,
              "taskbroker worker: task " + id + ": " + call + " abandoned: the worker stopped while it was retried");
          return Settled.ended(WorkerMetrics.Outcome.FAILED);
        }
        Status.Code code = e.getStatus().getCode();
        if (code != Status.Code.UNAVAILABLE && code != Status.Code.DEADLINE_EXCEEDED) {
          onError.accept("report task " + id, e);
          return Settled.ended(WorkerMetrics.Outcome.FAILED);
        }
        Duration pause = Backoff.delay(failures);
        if (Instant.now().plus(pause).plus(Worker.SETTLE_MARGIN).isAfter(ctx.leaseExpiresAt())) {
          LOG.log(
              System.Logger.Level.WARNING,
              "taskbroker worker: task " + id + ": " + call + " given up at the lease's expiry ("
                  + ErrorDetails.plain(e) + "); the broker will hand the task out again");
          metrics.get().leaseLost(ctx.queue());
          return Settled.ended(WorkerMetrics.Outcome.LEASE_LOST);
        }
        LOG.log(
            System.Logger.Level.WARNING,
            "taskbroker worker: task " + id + ": " + call + " failed (" + ErrorDetails.plain(e)
                + "); retrying in " + pause.toMillis() + " ms");
        try {
          Thread.sleep(pause.toMillis());
        } catch (InterruptedException ie) {
          Thread.currentThread().interrupt();
          return Settled.ended(WorkerMetrics.Outcome.FAILED);
        }
        metrics.get().settleRetry(ctx.queue());
      }
    }
  }
}
