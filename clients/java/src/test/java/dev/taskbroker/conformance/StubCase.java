package dev.taskbroker.conformance;

import static dev.taskbroker.client.ProtoTime.duration;
import com.google.protobuf.ByteString;
import dev.taskbroker.client.ProtoTime;
import dev.taskbroker.v1.AdminServiceGrpc.AdminServiceBlockingStub;
import dev.taskbroker.v1.BrokerServiceGrpc.BrokerServiceBlockingStub;
import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.GetTaskRequest;
import dev.taskbroker.v1.LeaseRequest;
import dev.taskbroker.v1.LeaseResponse;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.SubmitRequest;
import dev.taskbroker.v1.SubmitResponse;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskSpec;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.conformance.Conformance.Mismatch;

/**
 * The base of the contract cases (the first ten of clients/conformance/cases.txt and
 * schedule_every), which drive the generated stubs directly: the client, the case's queue and
 * the helpers those cases share. Each case's Case.java extends it.
 */
abstract class StubCase implements ConformanceCase {
  static final String WORKER_ID = "conf-java";

  Taskbroker tb;
  /** A fresh queue per case: conf.java.<case>.<random>. */
  String queue;

  @Override
  public final void run(Taskbroker tb, String queue) throws Exception {
    this.tb = tb;
    this.queue = queue;
    run();
  }

  /** The case itself, on {@link #tb} and {@link #queue}. */
  abstract void run() throws Exception;


  static void check(boolean ok, String reason) throws Mismatch {
    if (!ok) {
      throw new Mismatch(reason);
    }
  }

  BrokerServiceBlockingStub broker() {
    return tb.broker().withDeadlineAfter(10, TimeUnit.SECONDS);
  }

  AdminServiceBlockingStub admin() {
    return tb.admin().withDeadlineAfter(10, TimeUnit.SECONDS);
  }

  static ByteString bytes(String s) {
    return ByteString.copyFromUtf8(s);
  }

  TaskSpec.Builder spec() {
    return TaskSpec.newBuilder().setQueue(queue);
  }

  String submitOne(TaskSpec.Builder spec) throws Mismatch {
    SubmitResponse res = broker().submit(SubmitRequest.newBuilder().addTasks(spec).build());
    check(res.getResultsCount() == 1, "Submit returned " + res.getResultsCount() + " results, want 1");
    return res.getResults(0).getTaskId();
  }

  LeasedTask leaseOne(Duration lease, Duration wait) throws Mismatch {
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

  LeasedTask leaseOne(Duration lease) throws Mismatch {
    return leaseOne(lease, Duration.ZERO);
  }

  Task getTask(String taskId) {
    return admin().getTask(GetTaskRequest.newBuilder().setTaskId(taskId).build()).getTask();
  }

  void complete(LeasedTask t) {
    broker()
        .complete(
            CompleteRequest.newBuilder()
                .setTaskId(t.getTaskId())
                .setLeaseToken(t.getLeaseToken())
                .build());
  }

  static long millis(com.google.protobuf.Timestamp ts) {
    return ProtoTime.instant(ts).toEpochMilli();
  }
}
