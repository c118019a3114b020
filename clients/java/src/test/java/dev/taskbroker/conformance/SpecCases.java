package dev.taskbroker.conformance;

import com.google.protobuf.ByteString;
import dev.taskbroker.client.Backoff;
import dev.taskbroker.client.ErrorDetails;
import dev.taskbroker.client.ProtoTime;
import dev.taskbroker.client.TaskContext;
import dev.taskbroker.client.TaskHandler;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import dev.taskbroker.client.WorkerStoppedException;
import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.GetTaskRequest;
import dev.taskbroker.v1.LeaseRequest;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskSpec;
import dev.taskbroker.v1.TaskState;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.TraceFlags;
import io.opentelemetry.api.trace.TraceState;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.Scope;
import java.io.File;
import java.time.Duration;
import java.time.Instant;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;

/**
 * The client-library cases of clients/conformance/cases/ (the code of each is its folder's
 * Case.java; this class holds what it shares with the harness) (docs/client-spec.md points 1 to 7): they drive the
 * Worker runtime and the helpers of dev.taskbroker.client rather than the raw stubs.
 */
final class SpecCases {
  static final String TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
  static final String TRACEPARENT = "00-" + TRACE_ID + "-00f067aa0ba902b7-01";

  private SpecCases() {}

  static void check(boolean ok, String reason) {
    if (!ok) {
      throw new IllegalStateException(reason);
    }
  }

  static Worker.Builder worker(Taskbroker tb, String queue, TaskHandler handler) {
    return Worker.builder(tb, handler)
        .queues(queue)
        .workerId("conf-java")
        .pollWait(Duration.ofSeconds(1))
        .onError((during, e) -> {});
  }

  static String submit(Taskbroker tb, TaskSpec spec) {
    return tb.submit(spec).getTaskId();
  }

  static Task get(Taskbroker tb, String id) {
    return tb.admin().getTask(GetTaskRequest.newBuilder().setTaskId(id).build()).getTask();
  }

  static TaskState waitState(Taskbroker tb, String id, TaskState want)
      throws InterruptedException {
    long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
    for (; ; ) {
      TaskState s = get(tb, id).getState();
      if (s == want || System.nanoTime() > end) {
        return s;
      }
      Thread.sleep(50);
    }
  }

  static Throwable runUntilStopped(Worker w) throws Exception {
    CompletableFuture<Void> run = CompletableFuture.runAsync(w::run);
    try {
      run.get(20, TimeUnit.SECONDS);
      return null;
    } catch (java.util.concurrent.ExecutionException e) {
      return e.getCause();
    } catch (TimeoutException e) {
      w.close();
      throw new IllegalStateException("the worker kept running");
    }
  }

}
