/*
 * The conformance case stale_token, for the Java client: README.md beside this file says what it
 * does and expects. Compiled from a test source root of clients/java (pom.xml); the harness
 * (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import com.google.rpc.ErrorInfo;
import dev.taskbroker.client.ErrorDetails;
import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskState;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;

import dev.taskbroker.conformance.Conformance.Mismatch;

final class StaleTokenCase extends StubCase {
  @Override
  void run() throws Exception {
    staleToken();
  }

  private void staleToken() throws Mismatch {
    String taskId = submitOne(spec());
    leaseOne(Duration.ofSeconds(30));
    StatusRuntimeException err = null;
    try {
      broker().complete(CompleteRequest.newBuilder().setTaskId(taskId).setLeaseToken("stale").build());
    } catch (StatusRuntimeException e) {
      err = e;
    }
    check(err != null, "Complete with a stale token succeeded");
    Status s = err.getStatus();
    check(s.getCode() == Status.Code.ABORTED, "status " + s.getCode() + " (" + s.getDescription() + "), want ABORTED");
    ErrorInfo info = ErrorDetails.errorInfo(err).orElse(null);
    check(info != null, "no google.rpc.ErrorInfo in the status details");
    check(info.getReason().equals("LEASE_LOST"), "ErrorInfo.reason \"" + info.getReason() + "\", want LEASE_LOST");
    check(
        info.getDomain().equals("taskbroker.dev"),
        "ErrorInfo.domain \"" + info.getDomain() + "\", want taskbroker.dev");
    Task task = getTask(taskId);
    check(task.getState() == TaskState.TASK_STATE_LEASED, "GetTask state " + task.getState() + ", want LEASED");
  }
}
