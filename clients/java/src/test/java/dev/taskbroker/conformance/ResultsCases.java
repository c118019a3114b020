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
 * TaskFailedException) of clients/conformance/cases/: the code of each is its folder's
 * Case.java; this class holds what they share.
 */
final class ResultsCases {
  static final String WORKER_ID = "conf-java";

  private ResultsCases() {}

  static void check(boolean ok, String reason) {
    if (!ok) {
      throw new IllegalStateException(reason);
    }
  }

  static TaskSpec spec(String queue, String payload) {
    return TaskSpec.newBuilder().setQueue(queue).setPayload(ByteString.copyFromUtf8(payload)).build();
  }

  static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  static List<LeasedTask> lease(Taskbroker tb, String queue, Duration wait) {
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

  static TaskState state(Taskbroker tb, String taskId) {
    return tb.admin().getTask(GetTaskRequest.newBuilder().setTaskId(taskId).build()).getTask().getState();
  }

  /** Counts down when a call through it is answered RESOURCE_EXHAUSTED. */
  static final class Refusals implements ClientInterceptor {
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

}
