/*
 * The conformance case cancel_running, for the Java client: README.md beside this file says what
 * it does and expects. Compiled from a test source root of clients/java (pom.xml); the harness
 * (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.v1.CancelTaskRequest;
import dev.taskbroker.v1.FailRequest;
import dev.taskbroker.v1.FailResponse;
import dev.taskbroker.v1.HeartbeatRequest;
import dev.taskbroker.v1.HeartbeatResponse;
import dev.taskbroker.v1.LeaseRef;
import dev.taskbroker.v1.LeaseStatus;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.TaskState;
import java.time.Duration;

import dev.taskbroker.conformance.Conformance.Mismatch;

final class CancelRunningCase extends StubCase {
  @Override
  void run() throws Exception {
    cancelRunning();
  }

  private void cancelRunning() throws Mismatch {
    String taskId = submitOne(spec());
    LeasedTask t = leaseOne(Duration.ofSeconds(30));
    admin().cancelTask(CancelTaskRequest.newBuilder().setTaskId(taskId).build());
    HeartbeatResponse hb =
        broker()
            .heartbeat(
                HeartbeatRequest.newBuilder()
                    .setWorkerId(WORKER_ID)
                    .addLeases(LeaseRef.newBuilder().setTaskId(taskId).setLeaseToken(t.getLeaseToken()))
                    .build());
    check(hb.getLeasesCount() == 1, "Heartbeat returned " + hb.getLeasesCount() + " statuses, want 1");
    LeaseStatus st = hb.getLeases(0);
    check(
        st.getCancelRequested() && !st.getLost(),
        "cancel_requested=" + st.getCancelRequested() + " lost=" + st.getLost() + ", want true/false");
    FailResponse res =
        broker()
            .fail(
                FailRequest.newBuilder()
                    .setTaskId(taskId)
                    .setLeaseToken(t.getLeaseToken())
                    .setErrorMessage("cancelled")
                    .build());
    check(res.getState() == TaskState.TASK_STATE_CANCELLED, "Fail state " + res.getState() + ", want CANCELLED");
  }
}
