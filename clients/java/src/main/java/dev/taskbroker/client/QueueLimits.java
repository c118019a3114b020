package dev.taskbroker.client;

import dev.taskbroker.v1.LeasedTask;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;

/**
 * Caps the tasks of some queues running at once in one worker ({@link HandlerPolicy.Builder#concurrency}).
 * A Lease asks only for queues with room, for no more tasks than the smallest room among the
 * limited queues it names, and holds that many of each until its answer is counted; a settle's
 * lease_next stays within the freed slot's kind (its own limited queue, or the unlimited ones),
 * so the slot passes on without a gap.
 */
final class QueueLimits {
  private final Map<String, Integer> limit;
  private final Map<String, Integer> used = new HashMap<>();

  QueueLimits(Map<String, Integer> limit) {
    this.limit = Map.copyOf(limit);
  }

  boolean isEmpty() {
    return limit.isEmpty();
  }

  /** A Lease's queues and max tasks (0: every queue is full) and what counts its answer. */
  record Plan(List<String> queues, int maxTasks, Consumer<List<LeasedTask>> got) {}

  synchronized Plan reserve(List<String> all, int free) {
    if (limit.isEmpty()) {
      return new Plan(all, free, t -> {});
    }
    int n = free;
    List<String> queues = new ArrayList<>();
    List<String> held = new ArrayList<>();
    for (String q : all) {
      Integer lim = limit.get(q);
      int u = used.getOrDefault(q, 0);
      if (lim != null && u >= lim) {
        continue;
      }
      queues.add(q);
      if (lim != null) {
        held.add(q);
        n = Math.min(n, lim - u);
      }
    }
    if (queues.isEmpty()) {
      return new Plan(List.of(), 0, t -> {});
    }
    for (String q : held) {
      used.merge(q, n, Integer::sum);
    }
    int reserved = n;
    return new Plan(
        queues,
        n,
        tasks -> {
          synchronized (this) {
            for (String q : held) {
              used.merge(q, -reserved, Integer::sum);
            }
            count(tasks);
            notifyAll();
          }
        });
  }

  /** The queues a settle of a task of {@code queue} may lease the next task from. */
  List<String> nextQueues(List<String> all, String queue) {
    if (limit.isEmpty()) {
      return all;
    }
    if (limit.containsKey(queue)) {
      return List.of(queue);
    }
    return all.stream().filter(q -> !limit.containsKey(q)).toList();
  }

  /** Counts a finished task of {@code queue} out and the tasks its settle leased in. */
  synchronized void pass(String queue, List<LeasedTask> next) {
    if (limit.isEmpty()) {
      return;
    }
    if (limit.containsKey(queue)) {
      used.merge(queue, -1, Integer::sum);
    }
    count(next);
    notifyAll();
  }

  /** Waits up to {@code ms} for a limited queue's slot to come free. */
  synchronized void awaitFreed(long ms) throws InterruptedException {
    wait(ms);
  }

  private void count(List<LeasedTask> tasks) {
    for (LeasedTask t : tasks) {
      if (limit.containsKey(t.getQueue())) {
        used.merge(t.getQueue(), 1, Integer::sum);
      }
    }
  }
}
