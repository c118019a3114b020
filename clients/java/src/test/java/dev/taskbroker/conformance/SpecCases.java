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
 * The client-library cases of SCENARIO.md (docs/client-spec.md points 1 to 7): they drive the
 * Worker runtime and the helpers of dev.taskbroker.client rather than the raw stubs.
 */
final class SpecCases {
  private static final String TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
  private static final String TRACEPARENT = "00-" + TRACE_ID + "-00f067aa0ba902b7-01";

  private SpecCases() {}

  private static void check(boolean ok, String reason) {
    if (!ok) {
      throw new IllegalStateException(reason);
    }
  }

  private static Worker.Builder worker(Taskbroker tb, String queue, TaskHandler handler) {
    return Worker.builder(tb, handler)
        .queues(queue)
        .workerId("conf-java")
        .pollWait(Duration.ofSeconds(1))
        .onError((during, e) -> {});
  }

  private static String submit(Taskbroker tb, TaskSpec spec) {
    return tb.submit(spec).getTaskId();
  }

  private static Task get(Taskbroker tb, String id) {
    return tb.admin().getTask(GetTaskRequest.newBuilder().setTaskId(id).build()).getTask();
  }

  private static TaskState waitState(Taskbroker tb, String id, TaskState want)
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

  static void specDefaults(Taskbroker tb, String queue) {
    check(Worker.DEFAULT_CONCURRENCY == 4, "concurrency " + Worker.DEFAULT_CONCURRENCY);
    check(Worker.DEFAULT_POLL_WAIT.equals(Duration.ofSeconds(10)), "poll wait " + Worker.DEFAULT_POLL_WAIT);
    check(
        Worker.DEFAULT_LEASE_DURATION.equals(Duration.ofSeconds(30)),
        "lease " + Worker.DEFAULT_LEASE_DURATION);
    check(
        Worker.DEFAULT_LEASE_DURATION.dividedBy(3).equals(Duration.ofSeconds(10)),
        "heartbeat interval");
    check(
        Worker.DEFAULT_STOP_TIMEOUT.equals(Duration.ofSeconds(30)),
        "stop timeout " + Worker.DEFAULT_STOP_TIMEOUT);
    check(
        Backoff.ceiling(0).equals(Duration.ofMillis(200))
            && Backoff.ceiling(10).equals(Duration.ofSeconds(10)),
        "backoff ceilings " + Backoff.ceiling(0) + " " + Backoff.ceiling(10));
    Set<Duration> draws = new HashSet<>();
    for (int i = 0; i < 50; i++) {
      Duration d = Backoff.delay(3);
      check(d.toMillis() >= 160 && d.toMillis() <= 1600, "Backoff.delay(3) = " + d);
      draws.add(d);
    }
    check(draws.size() > 1, "Backoff.delay(3) has no jitter");
    for (Status.Code c :
        List.of(
            Status.Code.UNAUTHENTICATED,
            Status.Code.PERMISSION_DENIED,
            Status.Code.INVALID_ARGUMENT,
            Status.Code.UNIMPLEMENTED)) {
      check(ErrorDetails.stopsWorker(c), "stopsWorker(" + c + ") false");
    }
    check(!ErrorDetails.stopsWorker(Status.Code.UNAVAILABLE), "stopsWorker(UNAVAILABLE) true");
  }

  static void leaseLostReason(Taskbroker tb, String queue) {
    submit(tb, TaskSpec.newBuilder().setQueue(queue).build());
    List<LeasedTask> tasks =
        tb.broker()
            .withDeadlineAfter(10, TimeUnit.SECONDS)
            .lease(
                LeaseRequest.newBuilder()
                    .setWorkerId("conf-java")
                    .addQueues(queue)
                    .setMaxTasks(1)
                    .build())
            .getTasksList();
    check(tasks.size() == 1, "no task leased");
    try {
      tb.broker()
          .complete(
              CompleteRequest.newBuilder()
                  .setTaskId(tasks.get(0).getTaskId())
                  .setLeaseToken("stale")
                  .build());
      check(false, "Complete with a stale token succeeded");
    } catch (StatusRuntimeException e) {
      check(ErrorDetails.isLeaseLost(e), "isLeaseLost false for the broker's " + e.getStatus());
    }
    StatusRuntimeException bare =
        Status.ABORTED.withDescription("aborted for another reason").asRuntimeException();
    check(!ErrorDetails.isLeaseLost(bare), "isLeaseLost true for a bare ABORTED");
  }

  static void checkpointExtends(Taskbroker tb, String queue) throws Exception {
    String id = submit(tb, TaskSpec.newBuilder().setQueue(queue).build());
    AtomicReference<Instant> leased = new AtomicReference<>();
    AtomicReference<Instant> after = new AtomicReference<>();
    try (Worker w =
        worker(
                tb,
                queue,
                ctx -> {
                  leased.set(ctx.leaseExpiresAt());
                  Thread.sleep(100);
                  ctx.checkpoint(ByteString.copyFromUtf8("half"));
                  after.set(ctx.leaseExpiresAt());
                  return "ok".getBytes(java.nio.charset.StandardCharsets.UTF_8);
                })
            .leaseDuration(Duration.ofSeconds(4))
            .build()) {
      w.start();
      TaskState s = waitState(tb, id, TaskState.TASK_STATE_SUCCEEDED);
      check(s == TaskState.TASK_STATE_SUCCEEDED, "state " + s + ", want SUCCEEDED");
    }
    check(
        after.get() != null && after.get().isAfter(leased.get()),
        "expiry " + leased.get() + " -> " + after.get() + ": the checkpoint did not extend the lease");
  }

  static void deadlineCancels(Taskbroker tb, String queue) throws Exception {
    submit(
        tb,
        TaskSpec.newBuilder()
            .setQueue(queue)
            .setDeadline(ProtoTime.timestamp(Instant.now().plusSeconds(2)))
            .build());
    CompletableFuture<TaskContext.AbortKind> kind = new CompletableFuture<>();
    try (Worker w =
        worker(
                tb,
                queue,
                ctx -> {
                  long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
                  try {
                    while (!ctx.isCancelled() && System.nanoTime() < end) {
                      Thread.sleep(50);
                    }
                  } catch (InterruptedException e) {
                    // The deadline interrupts the handler: Java's cancellation.
                  }
                  kind.complete(ctx.abortKind().orElse(null));
                  throw new IllegalStateException("cancelled");
                })
            .build()) {
      w.start();
      TaskContext.AbortKind got = kind.get(25, TimeUnit.SECONDS);
      check(got == TaskContext.AbortKind.DEADLINE, "abort kind " + got + ", want DEADLINE");
    }
  }

  private static Throwable runUntilStopped(Worker w) throws Exception {
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

  static void stopCodes(Taskbroker tb, String queue) throws Exception {
    Throwable err = runUntilStopped(worker(tb, "has space", ctx -> null).build());
    check(
        err instanceof WorkerStoppedException
            && Status.fromThrowable(err).getCode() == Status.Code.INVALID_ARGUMENT,
        "bad queue: run() ended with " + err + ", want WorkerStoppedException INVALID_ARGUMENT");
    String token = System.getenv("TASKBROKER_TOKEN");
    if (token == null || token.isEmpty()) {
      return;
    }
    try (Taskbroker bad =
        Taskbroker.builder(System.getenv("TASKBROKER_ADDR"))
            .token("wrong-token-0123456789")
            .tls(
                new File(System.getenv("TASKBROKER_CA")),
                new File(System.getenv("TASKBROKER_CLIENT_CERT")),
                new File(System.getenv("TASKBROKER_CLIENT_KEY")))
            .build()) {
      err = runUntilStopped(worker(bad, queue, ctx -> null).build());
    }
    check(
        err instanceof WorkerStoppedException
            && Status.fromThrowable(err).getCode() == Status.Code.UNAUTHENTICATED,
        "wrong token: run() ended with " + err + ", want WorkerStoppedException UNAUTHENTICATED");
  }

  /**
   * Java's idiom (docs/client-spec.md): SIGTERM runs the JVM's shutdown hooks, and the hook of
   * {@link Worker#stopOnShutdown()} drains. Signalling our own JVM would end it, so the case checks
   * the hook is registered and runs that same drain.
   */
  static void drainOnSigterm(Taskbroker tb, String queue) throws Exception {
    String a = submit(tb, TaskSpec.newBuilder().setQueue(queue).setPayload(ByteString.copyFromUtf8("a")).build());
    CountDownLatch running = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    Worker w =
        worker(
                tb,
                queue,
                ctx -> {
                  running.countDown();
                  release.await(20, TimeUnit.SECONDS);
                  return "done".getBytes(java.nio.charset.StandardCharsets.UTF_8);
                })
            .concurrency(1)
            .build();
    Thread hook = w.stopOnShutdown();
    check(Runtime.getRuntime().removeShutdownHook(hook), "the shutdown hook was not registered");
    AtomicReference<String> b = new AtomicReference<>();
    Thread operator =
        new Thread(
            () -> {
              try {
                if (!running.await(20, TimeUnit.SECONDS)) {
                  return;
                }
                b.set(submit(tb, TaskSpec.newBuilder().setQueue(queue).setPayload(ByteString.copyFromUtf8("b")).build()));
                Thread sigterm = new Thread(hook); // what the JVM runs on SIGTERM
                sigterm.start();
                Thread.sleep(300);
                release.countDown();
                sigterm.join();
              } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
              }
            });
    operator.start();
    w.run();
    operator.join(20_000);
    check(b.get() != null, "the handler never ran");
    TaskState sa = get(tb, a).getState();
    TaskState sb = get(tb, b.get()).getState();
    check(
        sa == TaskState.TASK_STATE_SUCCEEDED && sb == TaskState.TASK_STATE_READY,
        "a " + sa + ", b " + sb + "; want SUCCEEDED, READY");
  }

  static void traceContext(Taskbroker tb, String queue) throws Exception {
    SpanContext sc =
        SpanContext.createFromRemoteParent(
            TRACE_ID, "00f067aa0ba902b7", TraceFlags.getSampled(), TraceState.getDefault());
    String id;
    Scope scope = Context.root().with(Span.wrap(sc)).makeCurrent();
    try {
      id = submit(tb, TaskSpec.newBuilder().setQueue(queue).build());
    } finally {
      scope.close();
    }
    String tp = get(tb, id).getMetadataMap().get("traceparent");
    check(TRACEPARENT.equals(tp), "metadata traceparent " + tp + ", want " + TRACEPARENT);
    CompletableFuture<String> seen = new CompletableFuture<>();
    try (Worker w =
        worker(
                tb,
                queue,
                ctx -> {
                  seen.complete(Span.current().getSpanContext().getTraceId());
                  return null;
                })
            .build()) {
      w.start();
      String got = seen.get(20, TimeUnit.SECONDS);
      check(TRACE_ID.equals(got), "handler saw trace id " + got + ", want " + TRACE_ID);
    }
  }
}
