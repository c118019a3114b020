/*
 * The conformance case complete_result, for the Java client: README.md beside this file says what
 * it does and expects. Compiled from a test source root of clients/java (pom.xml); the harness
 * (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskState;
import java.time.Duration;

import dev.taskbroker.conformance.Conformance.Mismatch;

final class CompleteResultCase extends StubCase {
  @Override
  void run() throws Exception {
    completeResult();
  }

  private void completeResult() throws Mismatch {
    String taskId = submitOne(spec());
    LeasedTask t = leaseOne(Duration.ofSeconds(30));
    CompleteRequest req =
        CompleteRequest.newBuilder()
            .setTaskId(taskId)
            .setLeaseToken(t.getLeaseToken())
            .setResult(bytes("done:42"))
            .build();
    broker().complete(req);
    broker().complete(req);
    Task task = getTask(taskId);
    check(task.getState() == TaskState.TASK_STATE_SUCCEEDED, "GetTask state " + task.getState() + ", want SUCCEEDED");
    String result = task.getResult().toStringUtf8();
    check(result.equals("done:42"), "result \"" + result + "\", want \"done:42\"");
  }
}
