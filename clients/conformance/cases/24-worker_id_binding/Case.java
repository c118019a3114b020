/*
 * The conformance case worker_id_binding, for the Java client: README.md beside this file says
 * what it does and expects. Compiled from a test source root of clients/java (pom.xml); the
 * harness (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import com.google.protobuf.ByteString;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import dev.taskbroker.client.WorkerStoppedException;
import dev.taskbroker.v1.BrokerServiceGrpc;
import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.GetTaskRequest;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.TaskSpec;
import dev.taskbroker.v1.TaskState;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.File;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import static dev.taskbroker.conformance.BindingCases.*;

final class WorkerIdBindingCase implements ConformanceCase {
  @Override
  public void run(Taskbroker tb, String queue) throws Exception {
    workerIdBinding(tb, queue);
  }

  static void workerIdBinding(Taskbroker tb, String queue) throws Exception {
    String id =
        tb.submitAll(
                List.of(
                    TaskSpec.newBuilder()
                        .setQueue(queue)
                        .setPayload(ByteString.copyFromUtf8("bound"))
                        .build()))
            .get(0)
            .getTaskId();
    String token = System.getenv("TASKBROKER_WORKER_TOKEN");
    boolean secure = token != null && !token.isEmpty();
    Taskbroker bound =
        secure
            ? Taskbroker.builder(System.getenv("TASKBROKER_ADDR"))
                .token(token)
                .tls(
                    new File(System.getenv("TASKBROKER_CA")),
                    new File(System.getenv("TASKBROKER_CLIENT_CERT")),
                    new File(System.getenv("TASKBROKER_CLIENT_KEY")))
                .build()
            : tb;
    try {
      BrokerServiceGrpc.BrokerServiceBlockingStub broker =
          bound.broker().withDeadlineAfter(10, TimeUnit.SECONDS);
      String allowed = WORKER_ID + "-bound-1";
      List<LeasedTask> got = broker.lease(leaseAs(queue, allowed)).getTasksList();
      check(
          got.size() == 1 && got.get(0).getTaskId().equals(id),
          "Lease as " + allowed + " returned " + got.size() + " tasks, want " + id);
      if (secure) {
        try {
          broker.lease(leaseAs(queue, WORKER_ID));
          throw new IllegalStateException(
              "Lease as " + WORKER_ID + ": OK, want PERMISSION_DENIED");
        } catch (StatusRuntimeException e) {
          String message = e.getStatus().getDescription();
          check(
              e.getStatus().getCode() == Status.Code.PERMISSION_DENIED
                  && message != null
                  && message.contains("worker_id"),
              "Lease as " + WORKER_ID + ": " + e.getStatus()
                  + ", want PERMISSION_DENIED naming worker_id");
        }
      }
      broker.complete(
          CompleteRequest.newBuilder()
              .setTaskId(id)
              .setLeaseToken(got.get(0).getLeaseToken())
              .build());
      TaskState state =
          tb.admin()
              .withDeadlineAfter(10, TimeUnit.SECONDS)
              .getTask(GetTaskRequest.newBuilder().setTaskId(id).build())
              .getTask()
              .getState();
      check(state == TaskState.TASK_STATE_SUCCEEDED, "the task is " + state + ", want SUCCEEDED");
      if (!secure) {
        return;
      }
      try (Worker w =
          Worker.builder(bound, ctx -> null)
              .queues(queue)
              .workerId(WORKER_ID)
              .pollWait(Duration.ofSeconds(1))
              .onError((during, e) -> {})
              .build()) {
        CompletableFuture<Void> run = CompletableFuture.runAsync(w::run);
        Throwable err = null;
        try {
          run.get(20, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
          err = e.getCause();
        } catch (TimeoutException e) {
          throw new IllegalStateException("the worker kept running");
        }
        check(
            err instanceof WorkerStoppedException
                && Status.fromThrowable(err).getCode() == Status.Code.PERMISSION_DENIED,
            "Worker as " + WORKER_ID + ": run() ended with " + err
                + ", want WorkerStoppedException PERMISSION_DENIED");
      }
    } finally {
      if (secure) {
        bound.close();
      }
    }
  }
}
