package dev.taskbroker.conformance;

import com.google.protobuf.ByteString;
import dev.taskbroker.client.ProtoTime;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.CompleteResponse;
import dev.taskbroker.v1.FailRequest;
import dev.taskbroker.v1.FailResponse;
import dev.taskbroker.v1.GetTaskRequest;
import dev.taskbroker.v1.LeaseRequest;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.SubmitResult;
import dev.taskbroker.v1.TaskSpec;
import dev.taskbroker.v1.TaskState;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * The {@code lease_next} case of clients/conformance/cases/ (its code is its folder's Case.java;
 * this class holds what it shares with the harness): a settle carries the next lease.
 */
final class LeaseNextCases {
  static final String WORKER_ID = "conf-java";

  private LeaseNextCases() {}

  static void check(boolean ok, String reason) {
    if (!ok) {
      throw new IllegalStateException(reason);
    }
  }

  static TaskSpec spec(String queue, String payload, int priority) {
    return TaskSpec.newBuilder()
        .setQueue(queue)
        .setPayload(ByteString.copyFromUtf8(payload))
        .setPriority(priority)
        .build();
  }

  static List<String> payloads(List<LeasedTask> tasks) {
    return tasks.stream().map(t -> t.getPayload().toStringUtf8()).toList();
  }

  static LeaseRequest next(String queue, int maxTasks) {
    return LeaseRequest.newBuilder()
        .setWorkerId(WORKER_ID)
        .addQueues(queue)
        .setMaxTasks(maxTasks)
        .setLeaseDuration(ProtoTime.duration(Duration.ofSeconds(30)))
        .build();
  }

  static TaskState state(Taskbroker tb, String taskId) {
    return tb.admin()
        .withDeadlineAfter(10, TimeUnit.SECONDS)
        .getTask(GetTaskRequest.newBuilder().setTaskId(taskId).build())
        .getTask()
        .getState();
  }

  static CompleteResponse complete(Taskbroker tb, LeasedTask t, LeaseRequest next) {
    return tb.broker()
        .withDeadlineAfter(10, TimeUnit.SECONDS)
        .complete(
            CompleteRequest.newBuilder()
                .setTaskId(t.getTaskId())
                .setLeaseToken(t.getLeaseToken())
                .setLeaseNext(next)
                .build());
  }

}
