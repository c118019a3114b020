/*
 * The conformance case lease_next, for the Java client: README.md beside this file says what it
 * does and expects. Compiled from a test source root of clients/java (pom.xml); the harness
 * (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.client.ProtoTime;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.v1.FailRequest;
import dev.taskbroker.v1.FailResponse;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.SubmitResult;
import dev.taskbroker.v1.TaskState;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import static dev.taskbroker.conformance.LeaseNextCases.*;

final class LeaseNextCase implements ConformanceCase {
  @Override
  public void run(Taskbroker tb, String queue) throws Exception {
    leaseNext(tb, queue);
  }

  static void leaseNext(Taskbroker tb, String queue) {
    List<SubmitResult> ids =
        tb.submitAll(List.of(spec(queue, "a", 2), spec(queue, "b", 1), spec(queue, "c", 0)));
    List<LeasedTask> got =
        tb.broker()
            .withDeadlineAfter(10, TimeUnit.SECONDS)
            .lease(
                next(queue, 1).toBuilder()
                    .setWait(ProtoTime.duration(Duration.ZERO))
                    .build())
            .getTasksList();
    check(payloads(got).equals(List.of("a")), "Lease returned " + payloads(got) + ", want [a]");
    List<LeasedTask> b = complete(tb, got.get(0), next(queue, 1)).getNextTasksList();
    check(payloads(b).equals(List.of("b")), "Complete's next_tasks " + payloads(b) + ", want [b]");
    check(
        b.get(0).getAttempt() == 1 && !b.get(0).getLeaseToken().isEmpty(),
        "b: attempt " + b.get(0).getAttempt() + ", want 1 with a lease token");
    TaskState sa = state(tb, ids.get(0).getTaskId());
    check(sa == TaskState.TASK_STATE_SUCCEEDED, "a is " + sa + ", want SUCCEEDED");
    FailResponse failed =
        tb.broker()
            .withDeadlineAfter(10, TimeUnit.SECONDS)
            .fail(
                FailRequest.newBuilder()
                    .setTaskId(b.get(0).getTaskId())
                    .setLeaseToken(b.get(0).getLeaseToken())
                    .setErrorMessage("boom")
                    .setNonRetryable(true)
                    .setLeaseNext(next(queue, 1))
                    .build());
    check(failed.getState() == TaskState.TASK_STATE_DEAD, "Fail: state " + failed.getState() + ", want DEAD");
    List<LeasedTask> c = failed.getNextTasksList();
    check(payloads(c).equals(List.of("c")), "Fail's next_tasks " + payloads(c) + ", want [c]");
    try {
      complete(tb, c.get(0), next(queue, 0));
      check(false, "Complete with lease_next.max_tasks 0: OK, want INVALID_ARGUMENT");
    } catch (StatusRuntimeException e) {
      Status s = e.getStatus();
      String msg = s.getDescription() == null ? "" : s.getDescription();
      check(
          s.getCode() == Status.Code.INVALID_ARGUMENT && msg.contains("lease_next.max_tasks"),
          "Complete with lease_next.max_tasks 0: "
              + s.getCode()
              + " ("
              + msg
              + "), want INVALID_ARGUMENT naming lease_next.max_tasks");
    }
    TaskState sc = state(tb, ids.get(2).getTaskId());
    check(sc == TaskState.TASK_STATE_LEASED, "c is " + sc + " after the refused Complete, want LEASED");
    List<LeasedTask> none = complete(tb, c.get(0), next(queue, 1)).getNextTasksList();
    check(none.isEmpty(), "the last Complete's next_tasks " + payloads(none) + ", want none");
    sc = state(tb, ids.get(2).getTaskId());
    check(sc == TaskState.TASK_STATE_SUCCEEDED, "c is " + sc + ", want SUCCEEDED");
  }
}
