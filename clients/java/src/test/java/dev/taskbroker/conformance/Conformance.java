package dev.taskbroker.conformance;

import static dev.taskbroker.client.ProtoTime.duration;
import static dev.taskbroker.client.ProtoTime.timestamp;

import com.google.protobuf.ByteString;
import com.google.rpc.ErrorInfo;
import dev.taskbroker.client.ErrorDetails;
import dev.taskbroker.client.ProtoTime;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.v1.AdminServiceGrpc.AdminServiceBlockingStub;
import dev.taskbroker.v1.BrokerServiceGrpc.BrokerServiceBlockingStub;
import dev.taskbroker.v1.CancelTaskRequest;
import dev.taskbroker.v1.CheckpointRequest;
import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.CreateScheduleRequest;
import dev.taskbroker.v1.DeleteScheduleRequest;
import dev.taskbroker.v1.GetScheduleRequest;
import dev.taskbroker.v1.OverlapPolicy;
import dev.taskbroker.v1.Schedule;
import dev.taskbroker.v1.ScheduleSpec;
import dev.taskbroker.v1.ScheduleState;
import dev.taskbroker.v1.TaskTemplate;
import dev.taskbroker.v1.FailRequest;
import dev.taskbroker.v1.FailResponse;
import dev.taskbroker.v1.GetTaskRequest;
import dev.taskbroker.v1.HeartbeatRequest;
import dev.taskbroker.v1.HeartbeatResponse;
import dev.taskbroker.v1.LeaseRef;
import dev.taskbroker.v1.LeaseRequest;
import dev.taskbroker.v1.LeaseResponse;
import dev.taskbroker.v1.LeaseStatus;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.RetryPolicy;
import dev.taskbroker.v1.SubmitRequest;
import dev.taskbroker.v1.SubmitResponse;
import dev.taskbroker.v1.SubmitResult;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskSpec;
import dev.taskbroker.v1.TaskState;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.security.SecureRandom;
import java.time.Duration;
import java.time.Instant;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

/**
 * The client conformance scenario (clients/conformance/SCENARIO.md) in Java.
 *
 * <p>Talks to the broker at $TASKBROKER_ADDR through the generated stubs only, prints {@code PASS
 * <case>} / {@code FAIL <case>: <reason>} per case and {@code N passed, M failed} last; exits 1
 * when any case failed.
 */
public final class Conformance {
  private static final String LANG = "java";
  private static final String WORKER_ID = "conf-" + LANG;
  private static final SecureRandom RANDOM = new SecureRandom();

  private final Taskbroker tb;
  /** A fresh queue per case: conf.java.<case>.<random>. */
  private String queue;

  private Conformance(Taskbroker tb) {
    this.tb = tb;
  }

  @FunctionalInterface
  private interface Case {
    void run() throws Exception;
  }

  /** A case's expectation did not hold. */
  private static final class Mismatch extends Exception {
    private static final long serialVersionUID = 1L;

    Mismatch(String message) {
      super(message);
    }
  }

  public static void main(String[] args) {
    String addr = System.getenv("TASKBROKER_ADDR");
    if (addr == null || addr.isEmpty()) {
      System.err.println("TASKBROKER_ADDR (host:port) is not set");
      System.exit(2);
    }
    int failed;
    try (Taskbroker tb = Taskbroker.fromEnv(addr)) {
      failed = new Conformance(tb).runAll();
    }
    System.exit(failed > 0 ? 1 : 0);
  }

  private int runAll() {
    Map<String, Case> cases = new LinkedHashMap<>();
    cases.put("lease_order", this::leaseOrder);
    cases.put("idempotent_submit", this::idempotentSubmit);
    cases.put("heartbeat_extends", this::heartbeatExtends);
    cases.put("checkpoint_handover", this::checkpointHandover);
    cases.put("retryable_fail", this::retryableFail);
    cases.put("non_retryable_fail", this::nonRetryableFail);
    cases.put("stale_token", this::staleToken);
    cases.put("complete_result", this::completeResult);
    cases.put("cancel_running", this::cancelRunning);
    cases.put("bad_input", this::badInput);
    cases.put("spec_defaults", () -> SpecCases.specDefaults(tb, queue));
    cases.put("lease_lost_reason", () -> SpecCases.leaseLostReason(tb, queue));
    cases.put("checkpoint_extends", () -> SpecCases.checkpointExtends(tb, queue));
    cases.put("deadline_cancels", () -> SpecCases.deadlineCancels(tb, queue));
    cases.put("stop_codes", () -> SpecCases.stopCodes(tb, queue));
    cases.put("drain_on_sigterm", () -> SpecCases.drainOnSigterm(tb, queue));
    cases.put("trace_propagation", () -> SpecCases.traceContext(tb, queue));
    cases.put("schedule_every", this::scheduleEvery);
    cases.put("targeted_task", () -> RoutingCases.targetedTask(tb, queue));
    cases.put("sticky_retry", () -> RoutingCases.stickyRetry(tb, queue));
    cases.put("dependency", () -> FlowCases.dependency(tb, queue));
    cases.put("wait_by_stream", () -> FlowCases.waitByStream(tb, queue));
    cases.put("lease_next", () -> LeaseNextCases.leaseNext(tb, queue));
    cases.put("worker_id_binding", () -> BindingCases.workerIdBinding(tb, queue));
    cases.put("typed_handlers", () -> TypedCases.typedHandlers(tb, queue));
    cases.put("dependency_results", () -> ResultsCases.dependencyResults(tb, queue));
    cases.put("keys_and_replace", () -> ResultsCases.keysAndReplace(tb, queue));
    cases.put("submit_backpressure", () -> ResultsCases.submitBackpressure(tb, queue));
    cases.put("dead_result", () -> ResultsCases.deadResult(tb, queue));
    int passed = 0;
    int failed = 0;
    for (Map.Entry<String, Case> c : cases.entrySet()) {
      byte[] suffix = new byte[3];
      RANDOM.nextBytes(suffix);
      queue = "conf." + LANG + "." + c.getKey() + "." + HexFormat.of().formatHex(suffix);
      try {
        c.getValue().run();
        System.out.println("PASS " + c.getKey());
        passed++;
      } catch (Exception e) {
        System.out.println("FAIL " + c.getKey() + ": " + reasonOf(e).replaceAll("\\s+", " "));
        failed++;
      }
    }
    System.out.println(passed + " passed, " + failed + " failed");
    return failed;
  }

  private static String reasonOf(Exception e) {
    if (e instanceof Mismatch) {
      return e.getMessage();
    }
    if (e instanceof StatusRuntimeException sre) {
      Status s = sre.getStatus();
      String cause = s.getCause() != null ? " (" + s.getCause() + ")" : "";
      return "rpc error " + s.getCode() + ": " + s.getDescription() + cause;
    }
    return e.toString();
  }

  // ---- helpers ----

  private static void check(boolean ok, String reason) throws Mismatch {
    if (!ok) {
      throw new Mismatch(reason);
    }
  }

  private BrokerServiceBlockingStub broker() {
    return tb.broker().withDeadlineAfter(10, TimeUnit.SECONDS);
  }

  private AdminServiceBlockingStub admin() {
    return tb.admin().withDeadlineAfter(10, TimeUnit.SECONDS);
  }

  private static ByteString bytes(String s) {
    return ByteString.copyFromUtf8(s);
  }

  private TaskSpec.Builder spec() {
    return TaskSpec.newBuilder().setQueue(queue);
  }

  private String submitOne(TaskSpec.Builder spec) throws Mismatch {
    SubmitResponse res = broker().submit(SubmitRequest.newBuilder().addTasks(spec).build());
    check(res.getResultsCount() == 1, "Submit returned " + res.getResultsCount() + " results, want 1");
    return res.getResults(0).getTaskId();
  }

  private LeasedTask leaseOne(Duration lease, Duration wait) throws Mismatch {
    LeaseResponse res =
        tb.broker()
            .withDeadlineAfter(wait.toMillis() + 10_000, TimeUnit.MILLISECONDS)
            .lease(
                LeaseRequest.newBuilder()
                    .setWorkerId(WORKER_ID)
                    .addQueues(queue)
                    .setMaxTasks(1)
                    .setLeaseDuration(duration(lease))
                    .setWait(duration(wait))
                    .build());
    check(
        res.getTasksCount() == 1,
        "Lease(wait=" + wait.toMillis() + "ms) returned " + res.getTasksCount() + " tasks, want 1");
    return res.getTasks(0);
  }

  private LeasedTask leaseOne(Duration lease) throws Mismatch {
    return leaseOne(lease, Duration.ZERO);
  }

  private Task getTask(String taskId) {
    return admin().getTask(GetTaskRequest.newBuilder().setTaskId(taskId).build()).getTask();
  }

  private void complete(LeasedTask t) {
    broker()
        .complete(
            CompleteRequest.newBuilder()
                .setTaskId(t.getTaskId())
                .setLeaseToken(t.getLeaseToken())
                .build());
  }

  private static long millis(com.google.protobuf.Timestamp ts) {
    return ProtoTime.instant(ts).toEpochMilli();
  }

  // ---- cases ----

  private void leaseOrder() throws Mismatch {
    Instant now = Instant.now();
    Duration hour = Duration.ofHours(1);
    List<TaskSpec> tasks =
        List.of(
            spec().setPayload(bytes("a")).setPriority(0).build(),
            spec().setPayload(bytes("b")).setPriority(5).build(),
            spec().setPayload(bytes("c")).setPriority(5).setDeadline(timestamp(now.plus(hour.multipliedBy(2)))).build(),
            spec().setPayload(bytes("d")).setPriority(5).setDeadline(timestamp(now.plus(hour))).build(),
            spec().setPayload(bytes("e")).setPriority(-1).build(),
            spec().setPayload(bytes("f")).setPriority(10).setRunAt(timestamp(now.plus(hour))).build());
    SubmitResponse sub = broker().submit(SubmitRequest.newBuilder().addAllTasks(tasks).build());
    check(sub.getResultsCount() == 6, "Submit returned " + sub.getResultsCount() + " results, want 6");
    LeaseResponse res =
        broker()
            .lease(
                LeaseRequest.newBuilder()
                    .setWorkerId(WORKER_ID)
                    .addQueues(queue)
                    .setMaxTasks(10)
                    .setLeaseDuration(duration(Duration.ofSeconds(30)))
                    .setWait(duration(Duration.ZERO))
                    .build());
    String got =
        res.getTasksList().stream().map(t -> t.getPayload().toStringUtf8()).collect(Collectors.joining(","));
    check(got.equals("d,c,b,a,e"), "leased payloads [" + got + "], want [d,c,b,a,e]");
    String attempts =
        res.getTasksList().stream().map(t -> String.valueOf(t.getAttempt())).collect(Collectors.joining(","));
    check(res.getTasksList().stream().allMatch(t -> t.getAttempt() == 1), "attempts [" + attempts + "], want all 1");
    for (LeasedTask t : res.getTasksList()) {
      complete(t);
    }
  }

  private void idempotentSubmit() throws Mismatch {
    SubmitRequest req = SubmitRequest.newBuilder().addTasks(spec().setKey("order-42")).build();
    SubmitResponse first = broker().submit(req);
    SubmitResponse second = broker().submit(req);
    check(first.getResultsCount() == 1 && second.getResultsCount() == 1, "Submit returned no result");
    SubmitResult a = first.getResults(0);
    SubmitResult b = second.getResults(0);
    check(a.getTaskId().equals(b.getTaskId()), "task ids differ: " + a.getTaskId() + " then " + b.getTaskId());
    check(
        !a.getDeduplicated() && b.getDeduplicated(),
        "deduplicated " + a.getDeduplicated() + " then " + b.getDeduplicated() + ", want false then true");
  }

  private void heartbeatExtends() throws Mismatch {
    String taskId = submitOne(spec());
    LeasedTask t = leaseOne(Duration.ofSeconds(5));
    check(t.getTaskId().equals(taskId), "leased " + t.getTaskId() + ", want " + taskId);
    HeartbeatResponse hb =
        broker()
            .heartbeat(
                HeartbeatRequest.newBuilder()
                    .setWorkerId(WORKER_ID)
                    .addLeases(LeaseRef.newBuilder().setTaskId(taskId).setLeaseToken(t.getLeaseToken()))
                    .setExtendBy(duration(Duration.ofSeconds(60)))
                    .build());
    check(hb.getLeasesCount() == 1, "Heartbeat returned " + hb.getLeasesCount() + " statuses, want 1");
    LeaseStatus st = hb.getLeases(0);
    check(!st.getLost(), "Heartbeat reported lost=true for a live lease");
    check(t.hasLeaseExpiresAt() && st.hasLeaseExpiresAt(), "lease_expires_at unset");
    long moved = millis(st.getLeaseExpiresAt()) - millis(t.getLeaseExpiresAt());
    check(moved >= 30_000, "lease_expires_at moved by " + moved + " ms, want >= 30000");
    HeartbeatResponse stale =
        broker()
            .heartbeat(
                HeartbeatRequest.newBuilder()
                    .setWorkerId(WORKER_ID)
                    .addLeases(LeaseRef.newBuilder().setTaskId(taskId).setLeaseToken("stale"))
                    .build());
    check(stale.getLeasesCount() == 1, "stale Heartbeat returned " + stale.getLeasesCount() + " statuses, want 1");
    check(stale.getLeases(0).getLost(), "stale Heartbeat answered lost=false, want true");
  }

  private void checkpointHandover() throws Mismatch {
    String taskId =
        submitOne(spec().setRetry(RetryPolicy.newBuilder().setInitialBackoff(duration(Duration.ZERO))));
    LeasedTask first = leaseOne(Duration.ofSeconds(1));
    broker()
        .checkpoint(
            CheckpointRequest.newBuilder()
                .setTaskId(taskId)
                .setLeaseToken(first.getLeaseToken())
                .setCheckpoint(bytes("step-3"))
                .build());
    LeasedTask second = leaseOne(Duration.ofSeconds(30), Duration.ofSeconds(15));
    check(second.getTaskId().equals(taskId), "second lease got " + second.getTaskId() + ", want " + taskId);
    check(second.getAttempt() == 2, "attempt " + second.getAttempt() + ", want 2");
    check(second.getHasCheckpoint(), "has_checkpoint false");
    String cp = second.getCheckpoint().toStringUtf8();
    check(cp.equals("step-3"), "checkpoint \"" + cp + "\", want \"step-3\"");
    check(
        Long.compareUnsigned(second.getFencingToken(), first.getFencingToken()) > 0,
        "fencing_token " + Long.toUnsignedString(second.getFencingToken()) + " not greater than "
            + Long.toUnsignedString(first.getFencingToken()));
    complete(second);
  }

  private void retryableFail() throws Mismatch {
    String taskId =
        submitOne(
            spec().setRetry(RetryPolicy.newBuilder().setMaxAttempts(3).setInitialBackoff(duration(Duration.ZERO))));
    LeasedTask first = leaseOne(Duration.ofSeconds(30));
    FailResponse res =
        broker()
            .fail(
                FailRequest.newBuilder()
                    .setTaskId(taskId)
                    .setLeaseToken(first.getLeaseToken())
                    .setErrorMessage("boom")
                    .build());
    check(
        res.getState() == TaskState.TASK_STATE_READY || res.getState() == TaskState.TASK_STATE_SCHEDULED,
        "Fail state " + res.getState() + ", want READY or SCHEDULED");
    check(res.hasNextRunAt(), "Fail next_run_at unset");
    LeasedTask second = leaseOne(Duration.ofSeconds(30), Duration.ofSeconds(5));
    check(second.getTaskId().equals(taskId), "second lease got " + second.getTaskId() + ", want " + taskId);
    check(second.getAttempt() == 2, "attempt " + second.getAttempt() + ", want 2");
    complete(second);
  }

  private void nonRetryableFail() throws Mismatch {
    String taskId = submitOne(spec());
    LeasedTask t = leaseOne(Duration.ofSeconds(30));
    FailResponse res =
        broker()
            .fail(
                FailRequest.newBuilder()
                    .setTaskId(taskId)
                    .setLeaseToken(t.getLeaseToken())
                    .setErrorMessage("bad input")
                    .setNonRetryable(true)
                    .build());
    check(res.getState() == TaskState.TASK_STATE_DEAD, "Fail state " + res.getState() + ", want DEAD");
    Task task = getTask(taskId);
    check(task.getState() == TaskState.TASK_STATE_DEAD, "GetTask state " + task.getState() + ", want DEAD");
    check(task.getLastError().equals("bad input"), "last_error \"" + task.getLastError() + "\", want \"bad input\"");
  }

  private void staleToken() throws Mismatch {
    String taskId = submitOne(spec());
    leaseOne(Duration.ofSeconds(30));
    StatusRuntimeException err = null;
    try {
      broker().complete(CompleteRequest.newBuilder().setTaskId(taskId).setLeaseToken("stale").build());
    } catch (StatusRuntimeException e) {
      err = e;
    }
    check(err != null, "Complete with a stale token succeeded");
    Status s = err.getStatus();
    check(s.getCode() == Status.Code.ABORTED, "status " + s.getCode() + " (" + s.getDescription() + "), want ABORTED");
    ErrorInfo info = ErrorDetails.errorInfo(err).orElse(null);
    check(info != null, "no google.rpc.ErrorInfo in the status details");
    check(info.getReason().equals("LEASE_LOST"), "ErrorInfo.reason \"" + info.getReason() + "\", want LEASE_LOST");
    check(
        info.getDomain().equals("taskbroker.dev"),
        "ErrorInfo.domain \"" + info.getDomain() + "\", want taskbroker.dev");
    Task task = getTask(taskId);
    check(task.getState() == TaskState.TASK_STATE_LEASED, "GetTask state " + task.getState() + ", want LEASED");
  }

  private void completeResult() throws Mismatch {
    String taskId = submitOne(spec());
    LeasedTask t = leaseOne(Duration.ofSeconds(30));
    CompleteRequest req =
        CompleteRequest.newBuilder()
            .setTaskId(taskId)
            .setLeaseToken(t.getLeaseToken())
            .setResult(bytes("done:42"))
            .build();
    broker().complete(req);
    broker().complete(req);
    Task task = getTask(taskId);
    check(task.getState() == TaskState.TASK_STATE_SUCCEEDED, "GetTask state " + task.getState() + ", want SUCCEEDED");
    String result = task.getResult().toStringUtf8();
    check(result.equals("done:42"), "result \"" + result + "\", want \"done:42\"");
  }

  private void cancelRunning() throws Mismatch {
    String taskId = submitOne(spec());
    LeasedTask t = leaseOne(Duration.ofSeconds(30));
    admin().cancelTask(CancelTaskRequest.newBuilder().setTaskId(taskId).build());
    HeartbeatResponse hb =
        broker()
            .heartbeat(
                HeartbeatRequest.newBuilder()
                    .setWorkerId(WORKER_ID)
                    .addLeases(LeaseRef.newBuilder().setTaskId(taskId).setLeaseToken(t.getLeaseToken()))
                    .build());
    check(hb.getLeasesCount() == 1, "Heartbeat returned " + hb.getLeasesCount() + " statuses, want 1");
    LeaseStatus st = hb.getLeases(0);
    check(
        st.getCancelRequested() && !st.getLost(),
        "cancel_requested=" + st.getCancelRequested() + " lost=" + st.getLost() + ", want true/false");
    FailResponse res =
        broker()
            .fail(
                FailRequest.newBuilder()
                    .setTaskId(taskId)
                    .setLeaseToken(t.getLeaseToken())
                    .setErrorMessage("cancelled")
                    .build());
    check(res.getState() == TaskState.TASK_STATE_CANCELLED, "Fail state " + res.getState() + ", want CANCELLED");
  }

  private void scheduleEvery() throws Mismatch {
    var schedules = tb.schedules().withDeadlineAfter(10, TimeUnit.SECONDS);
    String id = queue;
    Schedule created =
        schedules
            .createSchedule(
                CreateScheduleRequest.newBuilder()
                    .setSchedule(
                        Schedule.newBuilder()
                            .setScheduleId(id)
                            .setSpec(ScheduleSpec.newBuilder().setEvery(duration(Duration.ofSeconds(1))))
                            .setTask(TaskTemplate.newBuilder().setQueue(queue).setPayload(bytes("tick")))
                            .setOverlap(OverlapPolicy.OVERLAP_POLICY_ALLOW))
                    .build())
            .getSchedule();
    check(created.getState() == ScheduleState.SCHEDULE_STATE_ACTIVE, "state " + created.getState() + ", want ACTIVE");
    for (int i = 0; i < 2; i++) {
      LeasedTask t = leaseOne(Duration.ofSeconds(30), Duration.ofSeconds(10));
      check(t.getPayload().equals(bytes("tick")), "payload " + t.getPayload().toStringUtf8() + ", want tick");
      check(
          id.equals(t.getMetadataMap().get("taskbroker.schedule_id")),
          "metadata " + t.getMetadataMap() + " lacks taskbroker.schedule_id");
      broker().complete(CompleteRequest.newBuilder().setTaskId(t.getTaskId()).setLeaseToken(t.getLeaseToken()).build());
    }
    Schedule got = schedules.getSchedule(GetScheduleRequest.newBuilder().setScheduleId(id).build()).getSchedule();
    check(got.getRuns() >= 2, "runs " + got.getRuns() + ", want >= 2");
    schedules.deleteSchedule(DeleteScheduleRequest.newBuilder().setScheduleId(id).build());
    StatusRuntimeException err = null;
    try {
      schedules.getSchedule(GetScheduleRequest.newBuilder().setScheduleId(id).build());
    } catch (StatusRuntimeException e) {
      err = e;
    }
    check(err != null, "GetSchedule after delete succeeded");
    check(err.getStatus().getCode() == Status.Code.NOT_FOUND, "after delete: " + err.getStatus().getCode() + ", want NOT_FOUND");
  }

  private void badInput() throws Mismatch {
    StatusRuntimeException err = null;
    try {
      broker().submit(SubmitRequest.newBuilder().addTasks(TaskSpec.newBuilder().setQueue("has space")).build());
    } catch (StatusRuntimeException e) {
      err = e;
    }
    check(err != null, "Submit with queue \"has space\" succeeded");
    Status s = err.getStatus();
    check(
        s.getCode() == Status.Code.INVALID_ARGUMENT,
        "status " + s.getCode() + " (" + s.getDescription() + "), want INVALID_ARGUMENT");
    String msg = String.valueOf(s.getDescription());
    check(msg.contains("tasks[0].queue"), "message \"" + msg + "\" does not name tasks[0].queue");
  }
}
