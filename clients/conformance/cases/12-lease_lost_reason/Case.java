/*
 * The conformance case lease_lost_reason, for the Java client: README.md beside this file says
 * what it does and expects. Compiled from a test source root of clients/java (pom.xml); the
 * harness (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.client.ErrorDetails;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.LeaseRequest;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.TaskSpec;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.util.List;
import java.util.concurrent.TimeUnit;
import static dev.taskbroker.conformance.SpecCases.*;

final class LeaseLostReasonCase implements ConformanceCase {
  @Override
  public void run(Taskbroker tb, String queue) throws Exception {
    leaseLostReason(tb, queue);
  }

  static void leaseLostReason(Taskbroker tb, String queue) {
    submit(tb, TaskSpec.newBuilder().setQueue(queue).build());
    List<LeasedTask> tasks =
        tb.broker()
            .withDeadlineAfter(10, TimeUnit.SECONDS)
            .lease(
                LeaseRequest.newBuilder()
                    .setWorkerId("conf-java")
                    .addQueues(queue)
                    .setMaxTasks(1)
                    .build())
            .getTasksList();
    check(tasks.size() == 1, "no task leased");
    try {
      tb.broker()
          .complete(
              CompleteRequest.newBuilder()
                  .setTaskId(tasks.get(0).getTaskId())
                  .setLeaseToken("stale")
                  .build());
      check(false, "Complete with a stale token succeeded");
    } catch (StatusRuntimeException e) {
      check(ErrorDetails.isLeaseLost(e), "isLeaseLost false for the broker's " + e.getStatus());
    }
    StatusRuntimeException bare =
        Status.ABORTED.withDescription("aborted for another reason").asRuntimeException();
    check(!ErrorDetails.isLeaseLost(bare), "isLeaseLost true for a bare ABORTED");
  }
}
