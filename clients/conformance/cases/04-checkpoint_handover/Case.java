/*
 * The conformance case checkpoint_handover, for the Java client: README.md beside this file says
 * what it does and expects. Compiled from a test source root of clients/java (pom.xml); the
 * harness (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.v1.CheckpointRequest;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.RetryPolicy;
import java.time.Duration;
import static dev.taskbroker.client.ProtoTime.duration;

import dev.taskbroker.conformance.Conformance.Mismatch;

final class CheckpointHandoverCase extends StubCase {
  @Override
  void run() throws Exception {
    checkpointHandover();
  }

  private void checkpointHandover() throws Mismatch {
    String taskId =
        submitOne(spec().setRetry(RetryPolicy.newBuilder().setInitialBackoff(duration(Duration.ZERO))));
    LeasedTask first = leaseOne(Duration.ofSeconds(1));
    broker()
        .checkpoint(
            CheckpointRequest.newBuilder()
                .setTaskId(taskId)
                .setLeaseToken(first.getLeaseToken())
                .setCheckpoint(bytes("step-3"))
                .build());
    LeasedTask second = leaseOne(Duration.ofSeconds(30), Duration.ofSeconds(15));
    check(second.getTaskId().equals(taskId), "second lease got " + second.getTaskId() + ", want " + taskId);
    check(second.getAttempt() == 2, "attempt " + second.getAttempt() + ", want 2");
    check(second.getHasCheckpoint(), "has_checkpoint false");
    String cp = second.getCheckpoint().toStringUtf8();
    check(cp.equals("step-3"), "checkpoint \"" + cp + "\", want \"step-3\"");
    check(
        Long.compareUnsigned(second.getFencingToken(), first.getFencingToken()) > 0,
        "fencing_token " + Long.toUnsignedString(second.getFencingToken()) + " not greater than "
            + Long.toUnsignedString(first.getFencingToken()));
    complete(second);
  }
}
