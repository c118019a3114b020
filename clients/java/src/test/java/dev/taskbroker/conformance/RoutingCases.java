package dev.taskbroker.conformance;

import com.google.protobuf.ByteString;
import dev.taskbroker.client.ProtoTime;
import dev.taskbroker.client.Routing;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.FailRequest;
import dev.taskbroker.v1.FailResponse;
import dev.taskbroker.v1.LeaseRequest;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.RetryPolicy;
import dev.taskbroker.v1.SubmitRequest;
import dev.taskbroker.v1.TaskSpec;
import dev.taskbroker.v1.TaskState;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * The routing cases of SCENARIO.md: {@code targeted_task} and {@code sticky_retry},
 * on the broker stub with the {@link Routing} builders.
 */
final class RoutingCases {
  private static final String WORKER_ID = "conf-java";

  private RoutingCases() {}

  private static void check(boolean ok, String reason) {
    if (!ok) {
      throw new IllegalStateException(reason);
    }
  }

  private static List<LeasedTask> leaseAs(
      Taskbroker tb, String queue, String workerId, Map<String, String> labels, Duration wait) {
    return tb.broker()
        .withDeadlineAfter(wait.toMillis() + 10_000, TimeUnit.MILLISECONDS)
        .lease(
            LeaseRequest.newBuilder()
                .setWorkerId(workerId)
                .addQueues(queue)
                .setMaxTasks(10)
                .setLeaseDuration(ProtoTime.duration(Duration.ofSeconds(30)))
                .setWait(ProtoTime.duration(wait))
                .putAllLabels(labels)
                .build())
        .getTasksList();
  }

  private static List<String> payloads(List<LeasedTask> tasks) {
    return tasks.stream().map(t -> t.getPayload().toStringUtf8()).toList();
  }

  private static void complete(Taskbroker tb, LeasedTask t) {
    tb.broker()
        .withDeadlineAfter(10, TimeUnit.SECONDS)
        .complete(
            CompleteRequest.newBuilder()
                .setTaskId(t.getTaskId())
                .setLeaseToken(t.getLeaseToken())
                .build());
  }

  static void targetedTask(Taskbroker tb, String queue) {
    String elsewhere = WORKER_ID + "-elsewhere";
    tb.broker()
        .withDeadlineAfter(10, TimeUnit.SECONDS)
        .submit(
            SubmitRequest.newBuilder()
                .addTasks(
                    TaskSpec.newBuilder()
                        .setQueue(queue)
                        .setPayload(ByteString.copyFromUtf8("a"))
                        .setTarget(Routing.targetLabels(Map.of("gpu", "a100"))))
                .addTasks(
                    TaskSpec.newBuilder()
                        .setQueue(queue)
                        .setPayload(ByteString.copyFromUtf8("b"))
                        .setTarget(Routing.targetWorker(elsewhere)))
                .build());
    List<LeasedTask> got = leaseAs(tb, queue, WORKER_ID, Map.of(), Duration.ZERO);
    check(got.isEmpty(), "a worker without labels leased " + payloads(got));
    Map<String, String> carrying = Map.of("gpu", "a100", "region", "eu");
    got = leaseAs(tb, queue, WORKER_ID, carrying, Duration.ZERO);
    check(
        payloads(got).equals(List.of("a")),
        "the labelled worker leased " + payloads(got) + ", want [a]");
    complete(tb, got.get(0));
    got = leaseAs(tb, queue, WORKER_ID, carrying, Duration.ZERO);
    check(
        got.isEmpty(),
        "the labelled worker leased " + payloads(got) + ", a task targeted at another worker");
    got = leaseAs(tb, queue, elsewhere, Map.of(), Duration.ZERO);
    check(
        payloads(got).equals(List.of("b")),
        elsewhere + " leased " + payloads(got) + ", want [b]");
    complete(tb, got.get(0));
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
