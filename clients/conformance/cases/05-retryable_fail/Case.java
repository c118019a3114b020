/*
 * The conformance case retryable_fail, for the Java client: README.md beside this file says what
 * it does and expects. Compiled from a test source root of clients/java (pom.xml); the harness
 * (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.v1.FailRequest;
import dev.taskbroker.v1.FailResponse;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.RetryPolicy;
import dev.taskbroker.v1.TaskState;
import java.time.Duration;
import static dev.taskbroker.client.ProtoTime.duration;

import dev.taskbroker.conformance.Conformance.Mismatch;

final class RetryableFailCase extends StubCase {
  @Override
  void run() throws Exception {
    retryableFail();
  }

  private void retryableFail() throws Mismatch {
    String taskId =
        submitOne(
            spec().setRetry(RetryPolicy.newBuilder().setMaxAttempts(3).setInitialBackoff(duration(Duration.ZERO))));
    LeasedTask first = leaseOne(Duration.ofSeconds(30));
    FailResponse res =
        broker()
            .fail(
                FailRequest.newBuilder()
                    .setTaskId(taskId)
                    .setLeaseToken(first.getLeaseToken())
                    .setErrorMessage("boom")
                    .build());
    check(
        res.getState() == TaskState.TASK_STATE_READY || res.getState() == TaskState.TASK_STATE_SCHEDULED,
        "Fail state " + res.getState() + ", want READY or SCHEDULED");
    check(res.hasNextRunAt(), "Fail next_run_at unset");
    LeasedTask second = leaseOne(Duration.ofSeconds(30), Duration.ofSeconds(5));
    check(second.getTaskId().equals(taskId), "second lease got " + second.getTaskId() + ", want " + taskId);
    check(second.getAttempt() == 2, "attempt " + second.getAttempt() + ", want 2");
    complete(second);
  }
}
