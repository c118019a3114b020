package dev.taskbroker.spring;

import dev.taskbroker.client.HandlerPolicy;
import dev.taskbroker.v1.BrokerServiceGrpc;
import dev.taskbroker.v1.RetryPolicy;
import dev.taskbroker.v1.SubmitRequest;
import dev.taskbroker.v1.TaskSpec;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.MethodDescriptor;

/**
 * Fills in the retry policy of each task the client submits to a queue whose {@link TaskHandler}
 * gives one ({@code maxAttempts}, {@code backoff}, {@code backoffMultiplier}, {@code maxBackoff}),
 * field by field where the spec leaves the field unset: the spec's own {@code retry} wins, the
 * annotation comes next, and what both leave unset falls to the broker's settings of the queue.
 * A gRPC interceptor on the starter's client, so every Submit through it takes the defaults:
 * {@code Taskbroker.submit}, {@code submitAll}, {@link AfterCommitSubmitter}.
 */
public final class HandlerRetryDefaults implements ClientInterceptor {
  private final TaskHandlerMethods handlers;

  public HandlerRetryDefaults(TaskHandlerMethods handlers) {
    this.handlers = handlers;
  }

  /** {@code spec} with the unset fields of its retry policy taken from its queue's handler. */
  public TaskSpec apply(TaskSpec spec) {
    TaskHandlerMethods.Handler h = handlers.handler(spec.getQueue());
    if (h == null || h.retry().equals(RetryPolicy.getDefaultInstance())) {
      return spec;
    }
    RetryPolicy merged = HandlerPolicy.merge(spec.getRetry(), h.retry());
    return merged.equals(spec.getRetry()) ? spec : spec.toBuilder().setRetry(merged).build();
  }

  SubmitRequest apply(SubmitRequest req) {
    SubmitRequest.Builder b = req.toBuilder();
    for (int i = 0; i < b.getTasksCount(); i++) {
      b.setTasks(i, apply(b.getTasks(i)));
    }
    return b.build();
  }

  @Override
  public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
    ClientCall<Q, R> call = next.newCall(method, options);
    if (!method.getFullMethodName().equals(BrokerServiceGrpc.getSubmitMethod().getFullMethodName())) {
      return call;
    }
    return new ForwardingClientCall.SimpleForwardingClientCall<>(call) {
      @Override
      @SuppressWarnings("unchecked")
      public void sendMessage(Q message) {
        super.sendMessage(message instanceof SubmitRequest req ? (Q) apply(req) : message);
      }
    };
  }
}
