/*
 * The conformance case dependency, for the Java client: README.md beside this file says what it
 * does and expects. Compiled from a test source root of clients/java (pom.xml); the harness
 * (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.v1.CancelReason;
import dev.taskbroker.v1.FailRequest;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.SubmitResult;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskState;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import static dev.taskbroker.conformance.FlowCases.*;

final class DependencyCase implements ConformanceCase {
  @Override
  public void run(Taskbroker tb, String queue) throws Exception {
    dependency(tb, queue);
  }

  static void dependency(Taskbroker tb, String queue) {
    List<SubmitResult> ab =
        tb.submitAll(
            List.of(
                spec(queue, "a"), spec(queue, "b").toBuilder().addDependsOnIndex(0).build()));
    String a = ab.get(0).getTaskId();
    String b = ab.get(1).getTaskId();
    Task tb1 = get(tb, b);
    check(
        tb1.getState() == TaskState.TASK_STATE_BLOCKED,
        "b is " + tb1.getState() + ", want BLOCKED");
    check(
        tb1.getDependsOnList().equals(List.of(a)),
        "b depends_on " + tb1.getDependsOnList() + ", want [" + a + "]");
    List<LeasedTask> got = lease(tb, queue, 10, Duration.ZERO);
    check(payloads(got).equals(List.of("a")), "first Lease returned " + payloads(got) + ", want [a]");
    complete(tb, got.get(0), "");
    tb1 = get(tb, b);
    check(
        tb1.getState() == TaskState.TASK_STATE_READY,
        "after a completed b is " + tb1.getState() + ", want READY");
    got = lease(tb, queue, 10, Duration.ofSeconds(5));
    check(payloads(got).equals(List.of("b")), "second Lease returned " + payloads(got) + ", want [b]");
    complete(tb, got.get(0), "");

    String c = tb.submit(spec(queue, "c")).getTaskId();
    List<SubmitResult> de =
        tb.submitAll(
            List.of(
                spec(queue, "d").toBuilder().addDependsOn(c).build(),
                spec(queue, "e").toBuilder().addDependsOn(c).setRunIfDependencyFails(true).build()));
    got = lease(tb, queue, 10, Duration.ZERO);
    check(
        payloads(got).equals(List.of("c")),
        "third Lease returned " + payloads(got) + ", want [c] (d and e BLOCKED)");
    tb.broker()
        .withDeadlineAfter(10, TimeUnit.SECONDS)
        .fail(
            FailRequest.newBuilder()
                .setTaskId(got.get(0).getTaskId())
                .setLeaseToken(got.get(0).getLeaseToken())
                .setErrorMessage("broken")
                .setNonRetryable(true)
                .build());
    Task d = get(tb, de.get(0).getTaskId());
    check(
        d.getState() == TaskState.TASK_STATE_CANCELLED
            && d.getCancelReason() == CancelReason.CANCEL_REASON_DEPENDENCY_FAILED,
        "d is "
            + d.getState()
            + " ("
            + d.getCancelReason()
            + "), want CANCELLED (CANCEL_REASON_DEPENDENCY_FAILED)");
    Task e = get(tb, de.get(1).getTaskId());
    check(
        e.getState() == TaskState.TASK_STATE_READY,
        "e (run_if_dependency_fails) is " + e.getState() + ", want READY");
  }
}
