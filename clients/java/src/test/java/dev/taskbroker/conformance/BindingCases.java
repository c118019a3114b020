package dev.taskbroker.conformance;

import com.google.protobuf.ByteString;
import dev.taskbroker.client.ProtoTime;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import dev.taskbroker.client.WorkerStoppedException;
import dev.taskbroker.v1.BrokerServiceGrpc;
import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.GetTaskRequest;
import dev.taskbroker.v1.LeaseRequest;
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

/**
 * The {@code worker_id_binding} case of clients/conformance/cases/ (the code of each is its folder's
 * Case.java; this class holds what it shares with the harness): a worker token bound to worker ids
 * (TASKBROKER_WORKER_TOKEN, with --secure) leases under an allowed id, is refused under another
 * with PERMISSION_DENIED, and a Worker under that id stops by itself.
 */
final class BindingCases {
  static final String WORKER_ID = "conf-java";

  private BindingCases() {}

  static void check(boolean ok, String reason) {
    if (!ok) {
      throw new IllegalStateException(reason);
    }
  }

  static LeaseRequest leaseAs(String queue, String workerId) {
    return LeaseRequest.newBuilder()
        .setWorkerId(workerId)
        .addQueues(queue)
        .setMaxTasks(1)
        .setLeaseDuration(ProtoTime.duration(Duration.ofSeconds(30)))
        .build();
  }

}
