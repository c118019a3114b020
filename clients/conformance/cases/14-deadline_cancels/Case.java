/*
 * The conformance case deadline_cancels, for the Java client: README.md beside this file says what
 * it does and expects. Compiled from a test source root of clients/java (pom.xml); the harness
 * (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.client.ProtoTime;
import dev.taskbroker.client.TaskContext;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import dev.taskbroker.v1.TaskSpec;
import java.time.Instant;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import static dev.taskbroker.conformance.SpecCases.*;

final class DeadlineCancelsCase implements ConformanceCase {
  @Override
  public void run(Taskbroker tb, String queue) throws Exception {
    deadlineCancels(tb, queue);
  }

  static void deadlineCancels(Taskbroker tb, String queue) throws Exception {
    submit(
        tb,
        TaskSpec.newBuilder()
            .setQueue(queue)
            .setDeadline(ProtoTime.timestamp(Instant.now().plusSeconds(2)))
            .build());
    CompletableFuture<TaskContext.AbortKind> kind = new CompletableFuture<>();
    try (Worker w =
        worker(
                tb,
                queue,
                ctx -> {
                  long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
                  try {
                    while (!ctx.isCancelled() && System.nanoTime() < end) {
                      Thread.sleep(50);
                    }
                  } catch (InterruptedException e) {
                    // The deadline interrupts the handler: Java's cancellation.
                  }
                  kind.complete(ctx.abortKind().orElse(null));
                  throw new IllegalStateException("cancelled");
                })
            .build()) {
      w.start();
      TaskContext.AbortKind got = kind.get(25, TimeUnit.SECONDS);
      check(got == TaskContext.AbortKind.DEADLINE, "abort kind " + got + ", want DEADLINE");
    }
  }
}
