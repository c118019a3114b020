package dev.taskbroker.conformance;

import com.google.protobuf.ByteString;
import com.google.protobuf.FieldMask;
import com.google.rpc.QuotaFailure;
import com.google.rpc.RetryInfo;
import dev.taskbroker.client.PermanentException;
import dev.taskbroker.client.ProtoTime;
import dev.taskbroker.client.TaskFailedException;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.DuplicateKeyPolicy;
import dev.taskbroker.v1.GetTaskRequest;
import dev.taskbroker.v1.LeaseRequest;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.ListTasksRequest;
import dev.taskbroker.v1.QueueConfig;
import dev.taskbroker.v1.SubmitRequest;
import dev.taskbroker.v1.SubmitResult;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskKey;
import dev.taskbroker.v1.TaskSpec;
import dev.taskbroker.v1.TaskState;
import dev.taskbroker.v1.UpdateQueueRequest;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.ForwardingClientCallListener;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * {@code dependency_results} (a Worker's handler reads its dependency's result on its context),
 * {@code keys_and_replace} (the submit helper with a dependency on a key and a replace by key;
 * the leased dependent carries its dependency's result) and {@code submit_backpressure} (a queue's max_pending refuses a Submit with
 * RESOURCE_EXHAUSTED, RetryInfo and QuotaFailure; the client's submit waits the hinted delay
 * and gets in) and {@code dead_result} (waiting for a task that failed for good throws
 * TaskFailedException) of SCENARIO.md.
 */
final class ResultsCases {
  private static final String WORKER_ID = "conf-java";

  private ResultsCases() {}

  private static void check(boolean ok, String reason) {
    if (!ok) {
      throw new IllegalStateException(reason);
    }
  }

  private static TaskSpec spec(String queue, String payload) {
    return TaskSpec.newBuilder().setQueue(queue).setPayload(ByteString.copyFromUtf8(payload)).build();
  }

  static void dependencyResults(Taskbroker tb, String queue) throws Exception {
    String a = tb.submit(spec(queue, "a")).getTaskId();
    String b = tb.submit(spec(queue, "b").toBuilder().addDependsOn(a).build()).getTaskId();
    Map<String, String> seen = new java.util.concurrent.ConcurrentHashMap<>();
    Worker w =
        Worker.builder(tb)
            .handle(
                queue,
                ctx -> {
                  if (ctx.taskId().equals(a)) {
                    return "a-result".getBytes(java.nio.charset.StandardCharsets.UTF_8);
                  }
                  ctx.dependencyResults().forEach((id, r) -> seen.put(id, r.toStringUtf8()));
                  return ctx.dependencyResult(a, byte[].class);
                })
            .workerId(WORKER_ID)
            .pollWait(Duration.ofSeconds(1))
            .build();
    w.start();
    try {
      tb.waitFor(b, Duration.ofSeconds(20));
    } finally {
      w.stop(Duration.ofSeconds(5));
    }
    check(seen.equals(Map.of(a, "a-result")), "b's handler saw dependency_results " + seen + ", want {" + a + "=a-result}");
    Task tbk = tb.admin().getTask(GetTaskRequest.newBuilder().setTaskId(b).build()).getTask();
    check(
        tbk.getState() == TaskState.TASK_STATE_SUCCEEDED && tbk.getResult().toStringUtf8().equals("a-result"),
        "b is " + tbk.getState() + " with result " + tbk.getResult().toStringUtf8() + ", want SUCCEEDED with a-result");
  }

  private static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  private static List<LeasedTask> lease(Taskbroker tb, String queue, Duration wait) {
    return tb.broker()
        .lease(
            LeaseRequest.newBuilder()
                .setWorkerId(WORKER_ID)
                .addQueues(queue)
                .setMaxTasks(10)
                .setLeaseDuration(ProtoTime.duration(Duration.ofSeconds(30)))
                .setWait(ProtoTime.duration(wait))
                .build())
        .getTasksList();
  }

  private static TaskState state(Taskbroker tb, String taskId) {
    return tb.admin().getTask(GetTaskRequest.newBuilder().setTaskId(taskId).build()).getTask().getState();
  }

  static void keysAndReplace(Taskbroker tb, String queue) throws Exception {
    String b =
        tb.submit(
                tb.spec(queue, utf8("b"))
                    .addDependsOnKeys(TaskKey.newBuilder().setQueue(queue).setKey("k-a"))
                    .build())
            .getTaskId();
    TaskState blocked = state(tb, b);
    check(blocked == TaskState.TASK_STATE_BLOCKED, "b is " + blocked + " before k-a exists, want BLOCKED");

    Instant now = Instant.now();
    SubmitResult d1 =
        tb.submit(
            tb.spec(queue, utf8("v1"))
                .setKey("digest")
                .setRunAt(ProtoTime.timestamp(now.plus(Duration.ofHours(1))))
                .build());
    SubmitResult d2 =
        tb.submit(
            tb.spec(queue, utf8("v2"))
                .setKey("digest")
                .setRunAt(ProtoTime.timestamp(now))
                .setOnDuplicateKey(DuplicateKeyPolicy.DUPLICATE_KEY_POLICY_REPLACE_WAITING)
                .build());
    check(
        d2.getTaskId().equals(d1.getTaskId()) && d2.getDeduplicated() && d2.getReplaced(),
        "the second submit of digest answered " + d2.getTaskId() + " deduplicated=" + d2.getDeduplicated()
            + " replaced=" + d2.getReplaced() + ", want " + d1.getTaskId() + " deduplicated=true replaced=true");

    String a = tb.submit(tb.spec(queue, utf8("a")).setKey("k-a").build()).getTaskId();
    List<LeasedTask> first = lease(tb, queue, Duration.ZERO);
    Map<String, String> got = new TreeMap<>();
    first.forEach(t -> got.put(t.getTaskId(), t.getPayload().toStringUtf8()));
    Map<String, String> want = new TreeMap<>(Map.of(a, "a", d1.getTaskId(), "v2"));
    check(
        first.size() == 2 && got.equals(want),
        "the first Lease returned " + got + ", want " + want + " (a, and d with payload v2)");
    for (LeasedTask t : first) {
      CompleteRequest.Builder done =
          CompleteRequest.newBuilder().setTaskId(t.getTaskId()).setLeaseToken(t.getLeaseToken());
      if (t.getTaskId().equals(a)) {
        done.setResult(ByteString.copyFromUtf8("a-result"));
      }
      tb.broker().complete(done.build());
    }
    TaskState ready = state(tb, b);
    check(ready == TaskState.TASK_STATE_READY, "b is " + ready + " after a's Complete, want READY");

    List<LeasedTask> second = lease(tb, queue, Duration.ofSeconds(5));
    check(
        second.size() == 1 && second.get(0).getTaskId().equals(b),
        "the second Lease returned " + second.stream().map(t -> t.getPayload().toStringUtf8()).toList() + ", want exactly b");
    LeasedTask leasedB = second.get(0);
    Map<String, String> results = new TreeMap<>();
    leasedB.getDependencyResultsMap().forEach((id, r) -> results.put(id, r.toStringUtf8()));
    check(
        results.equals(Map.of(a, "a-result")),
        "b's dependency_results " + results + ", want {" + a + "=a-result}");
    tb.broker()
        .complete(
            CompleteRequest.newBuilder().setTaskId(leasedB.getTaskId()).setLeaseToken(leasedB.getLeaseToken()).build());
  }

  /** Counts down when a call through it is answered RESOURCE_EXHAUSTED. */
  private static final class Refusals implements ClientInterceptor {
    final CountDownLatch refused = new CountDownLatch(1);

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(
        MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
      return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, options)) {
        @Override
        public void start(Listener<R> listener, Metadata headers) {
          super.start(
              new ForwardingClientCallListener.SimpleForwardingClientCallListener<>(listener) {
                @Override
                public void onClose(Status status, Metadata trailers) {
                  if (status.getCode() == Status.Code.RESOURCE_EXHAUSTED) {
                    refused.countDown();
                  }
                  super.onClose(status, trailers);
                }
              },
              headers);
        }
      };
    }
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

  /**
   * {@code dead_result}: a task whose handler fails for good; waiting for it, and its typed
   * result getter, throw TaskFailedException with its id, state DEAD and the handler's message.
   */
  static void deadResult(Taskbroker tb, String queue) throws Exception {
    String d = tb.submit(queue, "order-7").getTaskId();
    Worker w =
        Worker.builder(tb)
            .handle(
                queue,
                ctx -> {
                  throw new PermanentException("no such order");
                })
            .workerId(WORKER_ID)
            .pollWait(Duration.ofSeconds(1))
            .build();
    w.start();
    TaskFailedException waited = null;
    try {
      tb.waitFor(d, Duration.ofSeconds(20));
    } catch (TaskFailedException e) {
      waited = e;
    } finally {
      w.stop(Duration.ofSeconds(5));
    }
    check(waited != null, "waitFor returned, want a TaskFailedException");
    TaskFailedException read = null;
    try {
      tb.result(waited.task(), String.class);
    } catch (TaskFailedException e) {
      read = e;
    }
    check(read != null, "result() returned, want a TaskFailedException");
    for (TaskFailedException e : List.of(waited, read)) {
      check(
          e.taskId().equals(d)
              && e.state() == TaskState.TASK_STATE_DEAD
              && e.lastError().equals("no such order"),
          "TaskFailedException {" + e.taskId() + ", " + e.state() + ", " + e.lastError()
              + "}, want {" + d + ", DEAD, no such order}");
    }
  }
}
