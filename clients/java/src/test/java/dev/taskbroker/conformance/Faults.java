package dev.taskbroker.conformance;

import dev.taskbroker.client.TaskContext;
import dev.taskbroker.client.TaskHandler;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import dev.taskbroker.v1.GetTaskRequest;
import dev.taskbroker.v1.RetryPolicy;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskSpec;
import dev.taskbroker.v1.TaskState;
import java.io.BufferedReader;
import java.io.FileReader;
import java.io.FileWriter;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;

/**
 * Runs clients/conformance/FAULTS.md against the broker at $TASKBROKER_ADDR, which
 * scripts/conformance.sh java --faults kills, restarts and pauses on request (the control FIFOs
 * $TASKBROKER_FAULT_CTL and $TASKBROKER_FAULT_ACK). Prints one PASS/FAIL line per case, then "N
 * passed, M failed"; exits 0 only when M is 0.
 */
public final class Faults {
  private static final List<LogRecord> RECORDS = new CopyOnWriteArrayList<>();

  private Faults() {}

  interface Case {
    void run(Taskbroker tb, String queue) throws Exception;
  }

  private static void check(boolean ok, String reason) {
    if (!ok) {
      throw new IllegalStateException(reason);
    }
  }

  /** Asks scripts/conformance.sh to do {@code command} to the broker; returns once it is done. */
  private static void fault(String command) throws Exception {
    try (FileWriter ctl = new FileWriter(System.getenv("TASKBROKER_FAULT_CTL"), StandardCharsets.UTF_8)) {
      ctl.write(command + "\n");
    }
    try (BufferedReader ack =
        new BufferedReader(new FileReader(System.getenv("TASKBROKER_FAULT_ACK"), StandardCharsets.UTF_8))) {
      String reply = String.valueOf(ack.readLine()).trim();
      check(reply.equals("ok"), "fault " + command + ": " + reply);
    }
  }

  private static Worker.Builder worker(Taskbroker tb, String queue, TaskHandler handler) {
    return Worker.builder(tb, handler).queues(queue).workerId("conf-java").pollWait(Duration.ofSeconds(1));
  }

  private static List<String> submit(Taskbroker tb, String queue, int n, RetryPolicy retry) {
    List<String> ids = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      TaskSpec.Builder spec = TaskSpec.newBuilder().setQueue(queue).setPayload(com.google.protobuf.ByteString.copyFromUtf8("x"));
      if (retry != null) {
        spec.setRetry(retry);
      }
      ids.add(tb.submit(spec.build()).getTaskId());
    }
    return ids;
  }

  private static Task get(Taskbroker tb, String id) {
    return tb.admin()
        .withDeadlineAfter(10, TimeUnit.SECONDS)
        .getTask(GetTaskRequest.newBuilder().setTaskId(id).build())
        .getTask();
  }

  private static Task waitFinished(Taskbroker tb, String id, int seconds) throws InterruptedException {
    long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
    for (; ; ) {
      try {
        Task t = get(tb, id);
        TaskState s = t.getState();
        if (s == TaskState.TASK_STATE_SUCCEEDED || s == TaskState.TASK_STATE_DEAD || s == TaskState.TASK_STATE_CANCELLED) {
          return t;
        }
        check(System.nanoTime() < end, "task " + id + " is " + s + " after " + seconds + " s");
      } catch (io.grpc.StatusRuntimeException e) {
        check(System.nanoTime() < end, "GetTask: " + e.getStatus());
      }
      Thread.sleep(100);
    }
  }

  static void restartMidSettle(Taskbroker tb, String queue) throws Exception {
    List<String> ids = submit(tb, queue, 3, null);
    Semaphore started = new Semaphore(0);
    CountDownLatch release = new CountDownLatch(1);
    AtomicInteger runs = new AtomicInteger();
    Worker w =
        worker(
                tb,
                queue,
                ctx -> {
                  runs.incrementAndGet();
                  started.release();
                  release.await();
                  return "done".getBytes(StandardCharsets.UTF_8);
                })
            .concurrency(3)
            .leaseDuration(Duration.ofSeconds(30))
            .build();
    w.start();
    try {
      check(started.tryAcquire(3, 20, TimeUnit.SECONDS), "the handlers did not all start within 20 s");
      fault("kill");
      release.countDown();
      Thread.sleep(4_000); // the outage itself (FAULTS.md): longer than five quick retries take
      fault("start");
      for (String id : ids) {
        Task t = waitFinished(tb, id, 25);
        check(
            t.getState() == TaskState.TASK_STATE_SUCCEEDED && t.getAttempt() == 1 && t.getResult().toStringUtf8().equals("done"),
            "task " + id + " is " + t.getState() + " attempt " + t.getAttempt() + " (last error " + t.getLastError()
                + "), want SUCCEEDED attempt 1 \"done\"");
      }
      check(runs.get() == 3, "the handler ran " + runs.get() + " times for 3 tasks");
    } finally {
      release.countDown();
      w.stop(Duration.ofSeconds(5));
    }
  }

  static void pausedPastLease(Taskbroker tb, String queue) throws Exception {
    String id =
        submit(tb, queue, 1, RetryPolicy.newBuilder().setMaxAttempts(3).setInitialBackoff(com.google.protobuf.Duration.getDefaultInstance()).build()).get(0);
    CountDownLatch started = new CountDownLatch(1);
    CompletableFuture<TaskContext.AbortKind> kind = new CompletableFuture<>();
    long[] toldAt = new long[1];
    Duration lease = Duration.ofSeconds(2);
    Worker w =
        worker(
                tb,
                queue,
                ctx -> {
                  if (ctx.attempt() > 1) {
                    return "second".getBytes(StandardCharsets.UTF_8);
                  }
                  started.countDown();
                  long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
                  try {
                    while (!ctx.isCancelled() && System.nanoTime() < end) {
                      Thread.sleep(20);
                    }
                  } catch (InterruptedException e) {
                    // the lost lease interrupts the handler
                  }
                  toldAt[0] = System.nanoTime();
                  kind.complete(ctx.abortKind().orElse(null));
                  return "late".getBytes(StandardCharsets.UTF_8);
                })
            .concurrency(1)
            .leaseDuration(lease)
            .build();
    w.start();
    try {
      check(started.await(20, TimeUnit.SECONDS), "the handler did not start within 20 s");
      long pausedAt = System.nanoTime();
      fault("pause");
      TaskContext.AbortKind got;
      try {
        got = kind.get(20, TimeUnit.SECONDS);
      } finally {
        fault("resume");
      }
      check(got == TaskContext.AbortKind.LOST, "the handler was flagged " + got + ", want LOST");
      long afterMs = TimeUnit.NANOSECONDS.toMillis(toldAt[0] - pausedAt);
      check(afterMs <= lease.toMillis() + 1_000, "the handler was told " + afterMs + " ms after the pause, want within the lease + 1 s");
      Task t = waitFinished(tb, id, 20);
      check(
          t.getState() == TaskState.TASK_STATE_SUCCEEDED && t.getAttempt() == 2 && t.getResult().toStringUtf8().equals("second"),
          "task is " + t.getState() + " attempt " + t.getAttempt() + ", want SUCCEEDED attempt 2 \"second\"");
      long warns =
          RECORDS.stream().filter(r -> r.getLevel().equals(Level.WARNING) && String.valueOf(r.getMessage()).contains(id)).count();
      check(warns == 1, warns + " WARN lines name the task, want 1");
    } finally {
      w.stop(Duration.ofSeconds(5));
    }
  }

  static void stopBound(Taskbroker tb, String queue) throws Exception {
    String id = submit(tb, queue, 1, null).get(0);
    CountDownLatch started = new CountDownLatch(1);
    CountDownLatch gate = new CountDownLatch(1);
    Duration stopTimeout = Duration.ofSeconds(2);
    Worker w =
        worker(
                tb,
                queue,
                ctx -> {
                  started.countDown();
                  while (true) {
                    try {
                      gate.await();
                      return "late".getBytes(StandardCharsets.UTF_8);
                    } catch (InterruptedException e) {
                      // ignores its cancellation
                    }
                  }
                })
            .concurrency(1)
            .stopTimeout(stopTimeout)
            .build();
    w.start();
    try {
      check(started.await(20, TimeUnit.SECONDS), "the handler did not start within 20 s");
      long t0 = System.nanoTime();
      w.close();
      long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
      long bound = stopTimeout.toMillis() + 2_000 + 1_000;
      check(tookMs <= bound, "stop took " + tookMs + " ms, want at most " + bound + " ms");
      Task t = get(tb, id);
      check(
          t.getState() == TaskState.TASK_STATE_READY && t.getAttempt() == 1,
          "after the stop the task is " + t.getState() + " attempt " + t.getAttempt() + ", want READY attempt 1 (handed back)");
    } finally {
      gate.countDown();
    }
  }

  /**
   * A typed handler returns a value the JSON serializer cannot encode (a plain Object: Jackson
   * finds no properties to write).
   */
  static void wrongResultType(Taskbroker tb, String queue) throws Exception {
    String id = submit(tb, queue, 1, RetryPolicy.newBuilder().setMaxAttempts(1).build()).get(0);
    Worker w =
        Worker.builder(tb)
            .handle(queue, byte[].class, (ctx, payload) -> new Object())
            .workerId("conf-java")
            .pollWait(Duration.ofSeconds(1))
            .build();
    w.start();
    try {
      Task t = waitFinished(tb, id, 10);
      check(t.getState() == TaskState.TASK_STATE_DEAD, "task is " + t.getState() + ", want DEAD");
      check(
          t.getLastError().contains("handler returned Object, which cannot be encoded"),
          "last_error " + t.getLastError());
    } finally {
      w.stop(Duration.ofSeconds(5));
    }
  }

  /**
   * Ten completions while the broker is paused: the first is in flight as a plain Complete, the
   * other nine queue behind it and go as one CompleteMany once it returns.
   */
  static void settleBatching(Taskbroker tb, String queue) throws Exception {
    List<String> ids = submit(tb, queue, 10, null);
    io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader reader =
        io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader.create();
    io.opentelemetry.sdk.metrics.SdkMeterProvider meters =
        io.opentelemetry.sdk.metrics.SdkMeterProvider.builder().registerMetricReader(reader).build();
    Semaphore started = new Semaphore(0);
    CountDownLatch release = new CountDownLatch(1);
    AtomicInteger runs = new AtomicInteger();
    Worker w =
        worker(
                tb,
                queue,
                ctx -> {
                  runs.incrementAndGet();
                  started.release();
                  release.await();
                  return "done".getBytes(StandardCharsets.UTF_8);
                })
            .concurrency(10)
            .meterProvider(meters)
            .build();
    w.start();
    boolean paused = false;
    try {
      check(started.tryAcquire(10, 20, TimeUnit.SECONDS), "the 10 handlers did not all start within 20 s");
      fault("pause");
      paused = true;
      release.countDown();
      long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
      while (w.queuedCompletions() < 9) {
        check(System.nanoTime() < end, "the worker queued " + w.queuedCompletions() + " completions, want 9");
        Thread.sleep(10);
      }
      fault("resume");
      paused = false;
      for (String id : ids) {
        Task t = waitFinished(tb, id, 20);
        check(
            t.getState() == TaskState.TASK_STATE_SUCCEEDED && t.getAttempt() == 1,
            "task " + id + " is " + t.getState() + " attempt " + t.getAttempt() + ", want SUCCEEDED attempt 1");
      }
    } finally {
      if (paused) {
        fault("resume");
      }
      release.countDown();
      w.stop(Duration.ofSeconds(5));
    }
    check(runs.get() == 10, "the handler ran " + runs.get() + " times, want 10");
    Map<String, Long> calls = new java.util.TreeMap<>();
    for (io.opentelemetry.sdk.metrics.data.MetricData m : reader.collectAllMetrics()) {
      if (m.getName().equals("taskbroker.worker.settle.calls")) {
        for (io.opentelemetry.sdk.metrics.data.LongPointData p : m.getLongSumData().getPoints()) {
          calls.merge(p.getAttributes().get(io.opentelemetry.api.common.AttributeKey.stringKey("rpc")), p.getValue(), Long::sum);
        }
      }
    }
    check(
        calls.equals(Map.of("Complete", 1L, "CompleteMany", 1L)),
        "taskbroker.worker.settle.calls is " + calls + ", want {Complete=1, CompleteMany=1}");
    meters.close();
  }

  static void httpPort(Taskbroker unused, String queue) throws Exception {
    try (Taskbroker http = Taskbroker.fromEnv(System.getenv("TASKBROKER_HTTP_ADDR"))) {
      Worker w = worker(http, queue, ctx -> null).build();
      CompletableFuture<Void> run = CompletableFuture.runAsync(w::run);
      try {
        run.get(20, TimeUnit.SECONDS);
        throw new IllegalStateException("run() returned, want WorkerStoppedException");
      } catch (java.util.concurrent.ExecutionException e) {
        check(e.getCause() instanceof dev.taskbroker.client.WorkerStoppedException, "run() threw " + e.getCause());
      } catch (java.util.concurrent.TimeoutException e) {
        w.close();
        throw new IllegalStateException("the worker did not stop by itself within 20 s");
      }
      // failFast (opt-in): the first Lease's error ends run() with one plain line.
      Worker fast = worker(http, queue, ctx -> null).failFast(true).build();
      CompletableFuture<Void> runFast = CompletableFuture.runAsync(fast::run);
      try {
        runFast.get(20, TimeUnit.SECONDS);
        throw new IllegalStateException("run() with failFast returned, want WorkerStoppedException");
      } catch (java.util.concurrent.ExecutionException e) {
        check(e.getCause() instanceof dev.taskbroker.client.WorkerStoppedException, "run() with failFast threw " + e.getCause());
        check(!e.getCause().getMessage().contains("\n"), "the error is not one line: " + e.getCause().getMessage());
      } catch (java.util.concurrent.TimeoutException e) {
        fast.close();
        throw new IllegalStateException("the failFast worker did not stop by itself within 20 s");
      }
    }
  }

  public static void main(String[] args) throws Exception {
    Logger jul = Logger.getLogger(Worker.class.getName());
    jul.addHandler(
        new Handler() {
          @Override
          public void publish(LogRecord r) {
            RECORDS.add(r);
          }

          @Override
          public void flush() {}

          @Override
          public void close() {}
        });
    Map<String, Case> cases = new LinkedHashMap<>();
    cases.put("restart_mid_settle", Faults::restartMidSettle);
    cases.put("paused_past_lease", Faults::pausedPastLease);
    cases.put("stop_bound", Faults::stopBound);
    cases.put("wrong_result_type", Faults::wrongResultType);
    cases.put("http_port", Faults::httpPort);
    cases.put("settle_batching", Faults::settleBatching);
    int passed = 0;
    int failed = 0;
    try (Taskbroker tb = Taskbroker.fromEnv(System.getenv("TASKBROKER_ADDR"))) {
      for (Map.Entry<String, Case> c : cases.entrySet()) {
        String queue = "conf.java." + c.getKey() + "." + Integer.toHexString(new java.util.Random().nextInt(0xffffff));
        try {
          c.getValue().run(tb, queue);
          System.out.println("PASS " + c.getKey());
          passed++;
        } catch (Exception e) {
          System.out.println("FAIL " + c.getKey() + ": " + String.valueOf(e.getMessage()).replaceAll("\\s+", " "));
          failed++;
        }
      }
    }
    System.out.println(passed + " passed, " + failed + " failed");
    System.exit(failed > 0 ? 1 : 0);
  }
}
