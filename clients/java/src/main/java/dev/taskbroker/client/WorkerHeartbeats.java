package dev.taskbroker.client;

import dev.taskbroker.v1.BrokerServiceGrpc;
import dev.taskbroker.v1.HeartbeatRequest;
import dev.taskbroker.v1.HeartbeatResponse;
import dev.taskbroker.v1.LeaseRef;
import dev.taskbroker.v1.LeaseStatus;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.BiConsumer;
import java.util.function.Supplier;

/**
 * The worker's lease keeping: one Heartbeat call extends every running lease (and flags the
 * tasks the broker says are lost or to be cancelled), and a timer per task flags it LOST when
 * its lease expires by the local clock, whether or not the broker answers.
 */
final class WorkerHeartbeats {
  private static final System.Logger LOG = System.getLogger(Worker.class.getName());

  private final BrokerServiceGrpc.BrokerServiceBlockingStub broker;
  private final String workerId;
  private final Duration leaseDuration;
  private final Duration heartbeatInterval;
  /** The worker's running tasks, by id. */
  private final Map<String, TaskContext> running;
  private final ScheduledExecutorService timers;
  /** The worker's metrics as they are now (they are replaced when it starts). */
  private final Supplier<WorkerMetrics> metrics;
  private final BiConsumer<String, Throwable> onError;

  WorkerHeartbeats(
      BrokerServiceGrpc.BrokerServiceBlockingStub broker,
      String workerId,
      Duration leaseDuration,
      Duration heartbeatInterval,
      Map<String, TaskContext> running,
      ScheduledExecutorService timers,
      Supplier<WorkerMetrics> metrics,
      BiConsumer<String, Throwable> onError) {
    this.broker = broker;
    this.workerId = workerId;
    this.leaseDuration = leaseDuration;
    this.heartbeatInterval = heartbeatInterval;
    this.running = running;
    this.timers = timers;
    this.metrics = metrics;
    this.onError = onError;
  }

  /** One Heartbeat for every running lease (run every heartbeat interval). */
  void beat() {
    List<TaskContext> live =
        running.values().stream()
            .filter(c -> c.abortKind().orElse(null) != TaskContext.AbortKind.LOST && !c.handedBack())
            .toList();
    if (live.isEmpty()) {
      return;
    }
    HeartbeatRequest.Builder req =
        HeartbeatRequest.newBuilder()
            .setWorkerId(workerId)
            .setExtendBy(ProtoTime.duration(leaseDuration));
    for (TaskContext c : live) {
      req.addLeases(
          LeaseRef.newBuilder().setTaskId(c.taskId()).setLeaseToken(c.task().getLeaseToken()));
    }
    try {
      HeartbeatResponse res =
          broker
              .withDeadlineAfter(
                  Math.max(heartbeatInterval.toMillis(), 1_000), TimeUnit.MILLISECONDS)
              .heartbeat(req.build());
      for (LeaseStatus status : res.getLeasesList()) {
        TaskContext c = running.get(status.getTaskId());
        if (c == null) {
          continue;
        }
        if (status.getLost()) {
          markLost(c, "a heartbeat answered lost");
        } else if (status.getCancelRequested()) {
          c.abort(TaskContext.AbortKind.CANCELLED);
        }
        if (status.hasLeaseExpiresAt()) {
          c.extendedTo(ProtoTime.instant(status.getLeaseExpiresAt()));
        }
      }
    } catch (RuntimeException e) {
      // A scheduled task that throws is never run again: catch everything here.
      onError.accept("heartbeat", e);
      Instant now = Instant.now();
      for (TaskContext c : live) {
        if (!c.leaseExpiresAt().isAfter(now)) {
          markLost(c, "the lease expired without a successful heartbeat");
        }
      }
    }
  }

  /**
   * Flags the task LOST (and interrupts its handler) when its lease expires by the local clock
   * without an extension, whether or not the broker answers heartbeats.
   */
  java.util.concurrent.ScheduledFuture<?> watchExpiry(TaskContext tc) {
    long ms = Math.max(Duration.between(Instant.now(), tc.leaseExpiresAt()).toMillis(), 0);
    try {
      return timers.schedule(
          () -> {
            if (tc.handlerReturned()) {
              return;
            }
            if (!tc.leaseExpiresAt().isAfter(Instant.now())) {
              if (tc.task().hasDeadline()
                  && !ProtoTime.instant(tc.task().getDeadline()).isAfter(tc.leaseExpiresAt())) {
                tc.abort(TaskContext.AbortKind.DEADLINE); // the lease ends at the task's deadline
                return;
              }
              markLost(tc, "the lease expired by the local clock");
            } else {
              watchExpiry(tc); // extended meanwhile: look again at the new expiry
            }
          },
          ms,
          TimeUnit.MILLISECONDS);
    } catch (RejectedExecutionException e) {
      return null; // stopping: the timers are gone
    }
  }

  /** Flags the task LOST, interrupts its handler, logs it once (WARN) and counts it. */
  void markLost(TaskContext tc, String why) {
    if (tc.markLost()) {
      metrics.get().leaseLost(tc.queue());
      LOG.log(
          System.Logger.Level.WARNING,
          "taskbroker worker: task " + tc.taskId() + ": lease lost (" + why + "); not settled by this worker");
    }
  }
}
