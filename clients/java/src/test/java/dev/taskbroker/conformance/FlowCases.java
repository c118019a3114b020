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
 * The flow cases of SCENARIO.md: {@code dependency} on the broker stub (through
 * {@link Taskbroker#submitAll}), and {@code wait_by_stream} with {@link Taskbroker#waitFor},
 * which follows AdminService.WatchTasks.
 */
final class FlowCases {
  private static final String WORKER_ID = "conf-java";

  private FlowCases() {}

  private static void check(boolean ok, String reason) {
    if (!ok) {
      throw new IllegalStateException(reason);
    }
  }

  private static TaskSpec spec(String queue, String payload) {
    return TaskSpec.newBuilder().setQueue(queue).setPayload(ByteString.copyFromUtf8(payload)).build();
  }

  private static List<LeasedTask> lease(Taskbroker tb, String queue, int max, Duration wait) {
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

  private static List<String> payloads(List<LeasedTask> tasks) {
    return tasks.stream().map(t -> t.getPayload().toStringUtf8()).toList();
  }

  private static void complete(Taskbroker tb, LeasedTask t, String result) {
    tb.broker()
        .withDeadlineAfter(10, TimeUnit.SECONDS)
        .complete(
            CompleteRequest.newBuilder()
                .setTaskId(t.getTaskId())
                .setLeaseToken(t.getLeaseToken())
                .setResult(ByteString.copyFromUtf8(result))
                .build());
  }

  private static Task get(Taskbroker tb, String id) {
    return tb.admin()
        .withDeadlineAfter(10, TimeUnit.SECONDS)
        .getTask(GetTaskRequest.newBuilder().setTaskId(id).build())
        .getTask();
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

  static void waitByStream(Taskbroker tb, String queue) throws Exception {
    String w = tb.submit(spec(queue, "w")).getTaskId();
    CompletableFuture<Task> waiting =
        CompletableFuture.supplyAsync(() -> tb.waitFor(w, Duration.ofSeconds(20)));
    List<LeasedTask> got = lease(tb, queue, 1, Duration.ofSeconds(10));
    check(
        got.size() == 1 && got.get(0).getTaskId().equals(w),
        "Lease returned " + payloads(got) + ", want " + w);
    complete(tb, got.get(0), "waited");
    Task t = waiting.get(30, TimeUnit.SECONDS);
    check(
        t.getState() == TaskState.TASK_STATE_SUCCEEDED
            && t.getResult().toStringUtf8().equals("waited"),
        "wait returned " + t.getState() + " with " + t.getResult().toStringUtf8()
            + ", want SUCCEEDED \"waited\"");
    Task again = tb.waitFor(w, Duration.ofSeconds(5));
    check(
        again.getState() == TaskState.TASK_STATE_SUCCEEDED,
        "second wait returned " + again.getState());
    String x = tb.submit(spec(queue, "x")).getTaskId();
    try {
      tb.waitFor(x, Duration.ofMillis(500));
      check(false, "the wait on x returned; want WaitTimeoutException");
    } catch (WaitTimeoutException expected) {
      // The client's timeout error.
    }
    Task tx = get(tb, x);
    check(
        tx.getState() == TaskState.TASK_STATE_READY,
        "x is " + tx.getState() + " after the timeout, want READY");
  }
}
