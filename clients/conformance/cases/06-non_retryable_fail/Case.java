/*
 * The conformance case non_retryable_fail, for the Java client: README.md beside this file says
 * what it does and expects. Compiled from a test source root of clients/java (pom.xml); the
 * harness (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.v1.FailRequest;
import dev.taskbroker.v1.FailResponse;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskState;
import java.time.Duration;

import dev.taskbroker.conformance.Conformance.Mismatch;

final class NonRetryableFailCase extends StubCase {
  @Override
  void run() throws Exception {
    nonRetryableFail();
  }

  private void nonRetryableFail() throws Mismatch {
    String taskId = submitOne(spec());
    LeasedTask t = leaseOne(Duration.ofSeconds(30));
    FailResponse res =
        broker()
            .fail(
                FailRequest.newBuilder()
                    .setTaskId(taskId)
                    .setLeaseToken(t.getLeaseToken())
                    .setErrorMessage("bad input")
                    .setNonRetryable(true)
                    .build());
    check(res.getState() == TaskState.TASK_STATE_DEAD, "Fail state " + res.getState() + ", want DEAD");
    Task task = getTask(taskId);
    check(task.getState() == TaskState.TASK_STATE_DEAD, "GetTask state " + task.getState() + ", want DEAD");
    check(task.getLastError().equals("bad input"), "last_error \"" + task.getLastError() + "\", want \"bad input\"");
  }
}
