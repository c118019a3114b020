package dev.taskbroker.spring.testing;

import dev.taskbroker.client.TaskbrokerException;
import dev.taskbroker.client.testing.InMemoryBroker;
import dev.taskbroker.v1.AdminServiceGrpc;
import dev.taskbroker.v1.BrokerServiceGrpc;
import dev.taskbroker.v1.GetTaskRequest;
import dev.taskbroker.v1.GetTaskResponse;
import dev.taskbroker.v1.ListTasksRequest;
import dev.taskbroker.v1.ListTasksResponse;
import dev.taskbroker.v1.SubmitRequest;
import dev.taskbroker.v1.SubmitResponse;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskSpec;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerMethodDefinition;
import io.grpc.ServerServiceDefinition;
import io.grpc.Status;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.function.UnaryOperator;

/**
 * An in-process gRPC server in front of an {@link InMemoryBroker}, so that the application's
 * {@code Taskbroker} bean submits to the fake: Submit runs the queue's handler at once (attempt
 * after attempt, as the broker would), GetTask and ListTasks read the fake's tasks, and
 * WaitTasks answers so that {@code waitFor} returns a finished task. Every other call is
 * UNIMPLEMENTED. Nothing leaves the JVM.
 */
public final class InMemoryTaskbrokerServer implements AutoCloseable {
  private final InMemoryBroker fake;
  private final UnaryOperator<TaskSpec> specDefaults;
  private final String name = "taskbroker-in-memory-" + UUID.randomUUID();
  private final Server server;

  /**
   * @param specDefaults applied to each submitted spec before the fake takes it (the handlers'
   *     retry defaults, as the real client's interceptor applies them)
   */
  public InMemoryTaskbrokerServer(InMemoryBroker fake, UnaryOperator<TaskSpec> specDefaults) {
    this.fake = fake;
    this.specDefaults = specDefaults;
    try {
      server =
          InProcessServerBuilder.forName(name)
              .directExecutor()
              .addService(new Broker())
              .addService(admin())
              .build()
              .start();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** A channel to this server; the caller closes it. */
  public ManagedChannel channel() {
    return InProcessChannelBuilder.forName(name).directExecutor().build();
  }

  public InMemoryBroker fake() {
    return fake;
  }

  @Override
  public void close() {
    server.shutdownNow();
    try {
      server.awaitTermination(5, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private static Status status(RuntimeException e) {
    if (e instanceof IllegalArgumentException) {
      return Status.INVALID_ARGUMENT.withDescription(e.getMessage());
    }
    if (e instanceof TaskbrokerException && String.valueOf(e.getMessage()).endsWith("not found")) {
      return Status.NOT_FOUND.withDescription(e.getMessage());
    }
    return Status.INTERNAL.withDescription(String.valueOf(e.getMessage())).withCause(e);
  }

  private final class Broker extends BrokerServiceGrpc.BrokerServiceImplBase {
    @Override
    public void submit(SubmitRequest req, StreamObserver<SubmitResponse> out) {
      try {
        List<TaskSpec> specs = req.getTasksList().stream().map(specDefaults).toList();
        out.onNext(SubmitResponse.newBuilder().addAllResults(fake.submitAll(specs)).build());
        out.onCompleted();
      } catch (RuntimeException e) {
        out.onError(status(e).asRuntimeException());
      }
    }
  }

  private final class Admin extends AdminServiceGrpc.AdminServiceImplBase {
    @Override
    public void getTask(GetTaskRequest req, StreamObserver<GetTaskResponse> out) {
      try {
        out.onNext(GetTaskResponse.newBuilder().setTask(fake.getTask(req.getTaskId())).build());
        out.onCompleted();
      } catch (RuntimeException e) {
        out.onError(status(e).asRuntimeException());
      }
    }

    @Override
    public void listTasks(ListTasksRequest req, StreamObserver<ListTasksResponse> out) {
      List<Task> tasks =
          fake.tasks().stream()
              .filter(t -> req.getQueue().isEmpty() || t.getQueue().equals(req.getQueue()))
              .filter(t -> req.getKey().isEmpty() || t.getKey().equals(req.getKey()))
              .filter(t -> req.getStatesList().isEmpty() || req.getStatesList().contains(t.getState()))
              .toList();
      out.onNext(ListTasksResponse.newBuilder().addAllTasks(tasks).build());
      out.onCompleted();
    }
  }

  /**
   * AdminService with WatchTasks answering only its headers: the fake runs a task within its
   * Submit, so a waiter that reads the task after the headers finds it finished; one that is not
   * (no handler for its queue) waits until its timeout.
   */
  private ServerServiceDefinition admin() {
    ServerServiceDefinition bound = new Admin().bindService();
    ServerServiceDefinition.Builder b = ServerServiceDefinition.builder(bound.getServiceDescriptor());
    String watch = AdminServiceGrpc.getWatchTasksMethod().getFullMethodName();
    for (ServerMethodDefinition<?, ?> m : bound.getMethods()) {
      if (!m.getMethodDescriptor().getFullMethodName().equals(watch)) {
        b.addMethod(m);
      }
    }
    b.addMethod(
        AdminServiceGrpc.getWatchTasksMethod(),
        (ServerCall<dev.taskbroker.v1.WatchTasksRequest, dev.taskbroker.v1.WatchTasksResponse> call,
            Metadata headers) -> {
          call.sendHeaders(new Metadata());
          call.request(1);
          return new ServerCall.Listener<>() {};
        });
    return b.build();
  }
}
