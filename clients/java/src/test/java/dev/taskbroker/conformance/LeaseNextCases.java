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

/** The {@code lease_next} case of SCENARIO.md: a settle carries the next lease. */
final class LeaseNextCases {
  private static final String WORKER_ID = "conf-java";

  private LeaseNextCases() {}

  private static void check(boolean ok, String reason) {
    if (!ok) {
      throw new IllegalStateException(reason);
    }
  }

  private static TaskSpec spec(String queue, String payload, int priority) {
    return TaskSpec.newBuilder()
        .setQueue(queue)
        .setPayload(ByteString.copyFromUtf8(payload))
        .setPriority(priority)
        .build();
  }

  private static List<String> payloads(List<LeasedTask> tasks) {
    return tasks.stream().map(t -> t.getPayload().toStringUtf8()).toList();
  }

  private static LeaseRequest next(String queue, int maxTasks) {
    return LeaseRequest.newBuilder()
        .setWorkerId(WORKER_ID)
        .addQueues(queue)
        .setMaxTasks(maxTasks)
        .setLeaseDuration(ProtoTime.duration(Duration.ofSeconds(30)))
        .build();
  }

  private static TaskState state(Taskbroker tb, String taskId) {
    return tb.admin()
        .withDeadlineAfter(10, TimeUnit.SECONDS)
        .getTask(GetTaskRequest.newBuilder().setTaskId(taskId).build())
        .getTask()
        .getState();
  }

  private static CompleteResponse complete(Taskbroker tb, LeasedTask t, LeaseRequest next) {
    return tb.broker()
        .withDeadlineAfter(10, TimeUnit.SECONDS)
        .complete(
            CompleteRequest.newBuilder()
                .setTaskId(t.getTaskId())
                .setLeaseToken(t.getLeaseToken())
                .setLeaseNext(next)
                .build());
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
