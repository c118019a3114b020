package dev.taskbroker.conformance;

import com.google.protobuf.ByteString;
import dev.taskbroker.client.ProtoTime;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.WaitTimeoutException;
import dev.taskbroker.v1.CancelReason;
import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.FailRequest;
import dev.taskbroker.v1.GetTaskRequest;
import dev.taskbroker.v1.LeaseRequest;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.SubmitResult;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskSpec;
import dev.taskbroker.v1.TaskState;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * The flow cases of clients/conformance/cases/ (the code of each is its folder's
 * Case.java; this class holds what it shares with the harness): {@code dependency} on the broker stub (through
 * {@link Taskbroker#submitAll}), and {@code wait_by_stream} with {@link Taskbroker#waitFor},
 * which follows AdminService.WatchTasks.
 */
final class FlowCases {
  static final String WORKER_ID = "conf-java";

  private FlowCases() {}

  static void check(boolean ok, String reason) {
    if (!ok) {
      throw new IllegalStateException(reason);
    }
  }

  static TaskSpec spec(String queue, String payload) {
    return TaskSpec.newBuilder().setQueue(queue).setPayload(ByteString.copyFromUtf8(payload)).build();
  }

  static List<LeasedTask> lease(Taskbroker tb, String queue, int max, Duration wait) {
    return tb.broker()
        .withDeadlineAfter(wait.toMillis() + 10_000, TimeUnit.MILLISECONDS)
        .lease(
            LeaseRequest.newBuilder()
                .setWorkerId(WORKER_ID)
                .addQueues(queue)
                .setMaxTasks(max)
                .setLeaseDuration(ProtoTime.duration(Duration.ofSeconds(30)))
                .setWait(ProtoTime.duration(wait))
                .build())
        .getTasksList();
  }

  static List<String> payloads(List<LeasedTask> tasks) {
    return tasks.stream().map(t -> t.getPayload().toStringUtf8()).toList();
  }

  static void complete(Taskbroker tb, LeasedTask t, String result) {
    tb.broker()
        .withDeadlineAfter(10, TimeUnit.SECONDS)
        .complete(
            CompleteRequest.newBuilder()
                .setTaskId(t.getTaskId())
                .setLeaseToken(t.getLeaseToken())
                .setResult(ByteString.copyFromUtf8(result))
                .build());
  }

  static Task get(Taskbroker tb, String id) {
    return tb.admin()
        .withDeadlineAfter(10, TimeUnit.SECONDS)
        .getTask(GetTaskRequest.newBuilder().setTaskId(id).build())
        .getTask();
  }

}
