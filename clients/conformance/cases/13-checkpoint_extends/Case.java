/*
 * The conformance case checkpoint_extends, for the Java client: README.md beside this file says
 * what it does and expects. Compiled from a test source root of clients/java (pom.xml); the
 * harness (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import com.google.protobuf.ByteString;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import dev.taskbroker.v1.TaskSpec;
import dev.taskbroker.v1.TaskState;
import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.atomic.AtomicReference;
import static dev.taskbroker.conformance.SpecCases.*;

final class CheckpointExtendsCase implements ConformanceCase {
  @Override
  public void run(Taskbroker tb, String queue) throws Exception {
    checkpointExtends(tb, queue);
  }

  static void checkpointExtends(Taskbroker tb, String queue) throws Exception {
    String id = submit(tb, TaskSpec.newBuilder().setQueue(queue).build());
    AtomicReference<Instant> leased = new AtomicReference<>();
    AtomicReference<Instant> after = new AtomicReference<>();
    try (Worker w =
        worker(
                tb,
                queue,
                ctx -> {
                  leased.set(ctx.leaseExpiresAt());
                  Thread.sleep(100);
                  ctx.checkpoint(ByteString.copyFromUtf8("half"));
                  after.set(ctx.leaseExpiresAt());
                  return "ok".getBytes(java.nio.charset.StandardCharsets.UTF_8);
                })
            .leaseDuration(Duration.ofSeconds(4))
            .build()) {
      w.start();
      TaskState s = waitState(tb, id, TaskState.TASK_STATE_SUCCEEDED);
      check(s == TaskState.TASK_STATE_SUCCEEDED, "state " + s + ", want SUCCEEDED");
    }
    check(
        after.get() != null && after.get().isAfter(leased.get()),
        "expiry " + leased.get() + " -> " + after.get() + ": the checkpoint did not extend the lease");
  }
}
