package dev.taskbroker.client;

import dev.taskbroker.v1.Fanout;
import dev.taskbroker.v1.StickyPolicy;
import dev.taskbroker.v1.StickyStrategy;
import dev.taskbroker.v1.Target;
import java.time.Duration;
import java.util.Map;

/**
 * Routing: the TaskSpec fields that say who may lease a task ({@link Target}), how
 * its retries stay on one worker ({@link StickyPolicy}) and how many copies Submit makes
 * ({@link Fanout}). Workers say what they are with {@link Worker.Builder#label}.
 *
 * <pre>{@code
 * SubmitResult r = tb.submit(TaskSpec.newBuilder().setQueue("render")
 *     .setTarget(Routing.targetLabels(Map.of("gpu", "a100")))
 *     .setSticky(Routing.softSticky(Duration.ofMinutes(1)))
 *     .build());
 * r.getCopyTaskIdsList(); // with a Fanout: every copy's id, the first being getTaskId()
 * }</pre>
 */
public final class Routing {
  /** At most this many labels on a worker or a target. */
  public static final int MAX_LABELS = 32;

  private Routing() {}

  /** Only the worker with this id may lease the task. */
  public static Target targetWorker(String workerId) {
    if (workerId == null || workerId.isEmpty()) {
      throw new IllegalArgumentException("targetWorker needs a worker id");
    }
    return Target.newBuilder().setWorkerId(workerId).build();
  }

  /**
   * Only a worker whose labels include every pair may lease the task. No such worker is not an
   * error: the task waits.
   */
  public static Target targetLabels(Map<String, String> labels) {
    if (labels.isEmpty()) {
      throw new IllegalArgumentException("targetLabels needs at least one label");
    }
    return Target.newBuilder().putAllLabels(labels).build();
  }

  /**
   * A retry is reserved for the worker that ran the failed attempt until {@code timeout} passes
   * (1 s to 24 h; null: the broker's default, 30 s), then any worker may take it.
   */
  public static StickyPolicy softSticky(Duration timeout) {
    StickyPolicy.Builder p = StickyPolicy.newBuilder().setStrategy(StickyStrategy.STICKY_STRATEGY_SOFT);
    if (timeout != null) {
      p.setTimeout(ProtoTime.duration(timeout));
    }
    return p.build();
  }

  /** A retry is reserved for that worker until the task's deadline or an admin requeue. */
  public static StickyPolicy hardSticky() {
    return StickyPolicy.newBuilder().setStrategy(StickyStrategy.STICKY_STRATEGY_HARD).build();
  }

  /**
   * Submit makes {@code copies} tasks (1 to 1000) sharing a fan-out group; with {@code
   * distinctWorkers} no worker gets two copies of the group.
   */
  public static Fanout fanout(int copies, boolean distinctWorkers) {
    if (copies < 1 || copies > 1000) {
      throw new IllegalArgumentException("fanout copies must be 1 to 1000");
    }
    return Fanout.newBuilder().setCopies(copies).setDistinctWorkers(distinctWorkers).build();
  }
}
