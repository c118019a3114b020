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
 * The routing cases of clients/conformance/cases/ (the code of each is its folder's
 * Case.java; this class holds what it shares with the harness): {@code targeted_task} and {@code sticky_retry},
 * on the broker stub with the {@link Routing} builders.
 */
final class RoutingCases {
  static final String WORKER_ID = "conf-java";

  private RoutingCases() {}

  static void check(boolean ok, String reason) {
    if (!ok) {
      throw new IllegalStateException(reason);
    }
  }

  static List<LeasedTask> leaseAs(
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

  static List<String> payloads(List<LeasedTask> tasks) {
    return tasks.stream().map(t -> t.getPayload().toStringUtf8()).toList();
  }

  static void complete(Taskbroker tb, LeasedTask t) {
    tb.broker()
        .withDeadlineAfter(10, TimeUnit.SECONDS)
        .complete(
            CompleteRequest.newBuilder()
                .setTaskId(t.getTaskId())
                .setLeaseToken(t.getLeaseToken())
                .build());
  }

}
