/*
 * The conformance case sticky_retry, for the Java client: README.md beside this file says what it
 * does and expects. Compiled from a test source root of clients/java (pom.xml); the harness
 * (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import com.google.protobuf.ByteString;
import dev.taskbroker.client.ProtoTime;
import dev.taskbroker.client.Routing;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.v1.FailRequest;
import dev.taskbroker.v1.FailResponse;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.RetryPolicy;
import dev.taskbroker.v1.TaskSpec;
import dev.taskbroker.v1.TaskState;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import static dev.taskbroker.conformance.RoutingCases.*;

final class StickyRetryCase implements ConformanceCase {
  @Override
  public void run(Taskbroker tb, String queue) throws Exception {
    stickyRetry(tb, queue);
  }

  static void stickyRetry(Taskbroker tb, String queue) {
    tb.submit(
        TaskSpec.newBuilder()
            .setQueue(queue)
            .setPayload(ByteString.copyFromUtf8("s"))
            .setRetry(
                RetryPolicy.newBuilder()
                    .setMaxAttempts(3)
                    .setInitialBackoff(ProtoTime.duration(Duration.ZERO)))
            .setSticky(Routing.softSticky(Duration.ofSeconds(60)))
            .build());
    List<LeasedTask> got = leaseAs(tb, queue, WORKER_ID, Map.of(), Duration.ZERO);
    check(got.size() == 1, "leased " + got.size() + " tasks, want 1");
    LeasedTask first = got.get(0);
    FailResponse failed =
        tb.broker()
            .withDeadlineAfter(10, TimeUnit.SECONDS)
            .fail(
                FailRequest.newBuilder()
                    .setTaskId(first.getTaskId())
                    .setLeaseToken(first.getLeaseToken())
                    .setErrorMessage("boom")
                    .build());
    check(
        failed.getState() == TaskState.TASK_STATE_READY
            || failed.getState() == TaskState.TASK_STATE_SCHEDULED,
        "Fail: state " + failed.getState() + ", want READY or SCHEDULED");
    String other = WORKER_ID + "-other";
    List<LeasedTask> stolen = leaseAs(tb, queue, other, Map.of(), Duration.ZERO);
    check(stolen.isEmpty(), other + " leased the retry reserved for " + WORKER_ID);
    List<LeasedTask> again = leaseAs(tb, queue, WORKER_ID, Map.of(), Duration.ofSeconds(5));
    check(
        again.size() == 1
            && again.get(0).getTaskId().equals(first.getTaskId())
            && again.get(0).getAttempt() == 2,
        WORKER_ID
            + " leased "
            + again.size()
            + " tasks (attempts "
            + again.stream().map(LeasedTask::getAttempt).toList()
            + "), want the retry with attempt 2");
    complete(tb, again.get(0));
  }
}
