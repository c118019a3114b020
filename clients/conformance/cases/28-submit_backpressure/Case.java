/*
 * The conformance case submit_backpressure, for the Java client: README.md beside this file says
 * what it does and expects. Compiled from a test source root of clients/java (pom.xml); the
 * harness (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import com.google.protobuf.FieldMask;
import com.google.rpc.QuotaFailure;
import com.google.rpc.RetryInfo;
import dev.taskbroker.client.ProtoTime;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.GetTaskRequest;
import dev.taskbroker.v1.LeaseRequest;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.ListTasksRequest;
import dev.taskbroker.v1.QueueConfig;
import dev.taskbroker.v1.SubmitRequest;
import dev.taskbroker.v1.SubmitResult;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.UpdateQueueRequest;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import static dev.taskbroker.conformance.ResultsCases.*;

final class SubmitBackpressureCase implements ConformanceCase {
  @Override
  public void run(Taskbroker tb, String queue) throws Exception {
    submitBackpressure(tb, queue);
  }

  static void submitBackpressure(Taskbroker tb, String queue) throws Exception {
    tb.admin()
        .updateQueue(
            UpdateQueueRequest.newBuilder()
                .setName(queue)
                .setConfig(QueueConfig.newBuilder().setMaxPending(1))
                .setUpdateMask(FieldMask.newBuilder().addPaths("max_pending"))
                .build());
    tb.submit(spec(queue, "1"));
    StatusRuntimeException refusal = null;
    try {
      tb.broker().submit(SubmitRequest.newBuilder().addTasks(spec(queue, "2")).build());
    } catch (StatusRuntimeException e) {
      refusal = e;
    }
    check(
        refusal != null && refusal.getStatus().getCode() == Status.Code.RESOURCE_EXHAUSTED,
        "Submit 2 over max_pending answered " + (refusal == null ? "OK" : refusal.getStatus().getCode()) + ", want RESOURCE_EXHAUSTED");
    com.google.rpc.Status details = StatusProto.fromThrowable(refusal);
    boolean retry = details != null && details.getDetailsList().stream().anyMatch(d -> d.is(RetryInfo.class));
    boolean quota = details != null && details.getDetailsList().stream().anyMatch(d -> d.is(QuotaFailure.class));
    check(retry && quota, "RESOURCE_EXHAUSTED details: RetryInfo " + retry + ", QuotaFailure " + quota + "; want both");
    int listed = tb.admin().listTasks(ListTasksRequest.newBuilder().setQueue(queue).build()).getTasksCount();
    check(listed == 1, "the refused Submit left " + listed + " tasks, want 1");

    Refusals refusals = new Refusals();
    try (Taskbroker watched =
        Taskbroker.builderFromEnv(System.getenv("TASKBROKER_ADDR")).intercept(refusals).build()) {
      CompletableFuture<SubmitResult> submitted =
          CompletableFuture.supplyAsync(() -> watched.submit(spec(queue, "2")));
      check(refusals.refused.await(10, TimeUnit.SECONDS), "the client's submit was not refused within 10 s");
      check(!submitted.isDone(), "the client's submit returned before it was let in");
      List<LeasedTask> got =
          tb.broker()
              .lease(
                  LeaseRequest.newBuilder()
                      .setWorkerId(WORKER_ID)
                      .addQueues(queue)
                      .setMaxTasks(1)
                      .setLeaseDuration(ProtoTime.duration(Duration.ofSeconds(30)))
                      .setWait(ProtoTime.duration(Duration.ZERO))
                      .build())
              .getTasksList();
      check(got.size() == 1 && got.get(0).getPayload().toStringUtf8().equals("1"), "Lease returned " + got.size() + " tasks, want task 1");
      tb.broker()
          .complete(
              CompleteRequest.newBuilder()
                  .setTaskId(got.get(0).getTaskId())
                  .setLeaseToken(got.get(0).getLeaseToken())
                  .build());
      SubmitResult second = submitted.get(30, TimeUnit.SECONDS);
      Task t2 = tb.admin().getTask(GetTaskRequest.newBuilder().setTaskId(second.getTaskId()).build()).getTask();
      check(t2.getPayload().toStringUtf8().equals("2"), "task 2 has payload " + t2.getPayload().toStringUtf8());
    }
  }
}
