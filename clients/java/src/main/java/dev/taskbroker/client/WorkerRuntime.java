package dev.taskbroker.client;

import dev.taskbroker.v1.BrokerServiceGrpc;
import dev.taskbroker.v1.FailRequest;
import dev.taskbroker.v1.LeaseRequest;
import dev.taskbroker.v1.LeasedTask;
import io.grpc.Context;
import io.grpc.Status;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BiConsumer;

/**
 * What a {@link Worker} runs: its state, the lease loop that fills free slots, the slots that
 * run a task and the tasks its settles lease, and the stop (drain, interrupt, hand back). The
 * heartbeats are {@link WorkerHeartbeats}', the settles {@link WorkerSettler}'s.
 */
final class WorkerRuntime {
  private static final System.Logger LOG = System.getLogger(Worker.class.getName());

  private final BrokerServiceGrpc.BrokerServiceBlockingStub broker;
  /** The handler of each queue, in registration order. */
  private final Map<String, Registration> registry;
  private final List<String> queues;
  private final List<Middleware> middleware;
  private final Serializer serializer;
  /** The provider given to the builder; null: the global one, looked up at start. */
  private final io.opentelemetry.api.metrics.MeterProvider meterProvider;
  private volatile WorkerMetrics metrics;
  private final Completer completer;
  /** Heartbeats, the local-clock lease watch and lost leases (WorkerHeartbeats). */
  private final WorkerHeartbeats heartbeats;
  /** Complete and Fail, retried while the broker is unreachable (WorkerSettler). */
  private final WorkerSettler settler;
  private final ExecutorService completerThread;
  private final boolean failFast;
  private final String workerId;
  private final Map<String, String> labels;
  private final int concurrency;
  private final Duration leaseDuration;
  private final Duration pollWait;
  private final Duration heartbeatInterval;
  private final BiConsumer<String, Throwable> onError;
  private final boolean leaseNext;
  private final java.util.concurrent.atomic.AtomicLong leaseNextTasks =
      new java.util.concurrent.atomic.AtomicLong();
  /** Set once the drain timed out: a task a settle brings after that is stopped at once. */
  private volatile boolean stopTimedOut;

  private final Map<String, TaskContext> running = new ConcurrentHashMap<>();
  /** One permit per free slot: the lease loop asks for no more tasks than these. */
  private final Semaphore slots;
  /** The queues' own limits ({@link HandlerPolicy.Builder#concurrency}). */
  private final QueueLimits limits;
  private final Executor handlers;
  /** The pool this worker made itself (no executor given), shut down when it stops. */
  private final ExecutorService ownPool;
  private final ScheduledExecutorService timers;
  private final Thread leaseThread;
  /** The in-flight long poll, cancelled by stop() so it does not hold the stop up. */
  private final AtomicReference<Context.CancellableContext> poll = new AtomicReference<>();
  private final CountDownLatch stopRequested = new CountDownLatch(1);
  private final CountDownLatch stopped = new CountDownLatch(1);
  private volatile boolean stopping;
  private volatile Duration stopTimeout;
  private final Duration stopGrace;
  /** Set when a stop's margin ran out: settles still retried then are abandoned. */
  private volatile boolean abandoned;
  private volatile RuntimeException failure;
  private boolean started;
  /** Guards started and the start of a stop: the Worker's monitor, as its synchronized methods. */
  private final Object lock;

  /** @param lock the monitor of start, stop and isRunning: the {@link Worker} itself */
  WorkerRuntime(Worker.Builder b, Object lock) {
    this.lock = lock;
    this.broker = b.taskbroker.broker();
    this.registry = b.registry();
    this.queues = List.copyOf(registry.keySet());
    this.middleware = List.copyOf(b.middleware);
    this.serializer = b.serializer != null ? b.serializer : b.taskbroker.serializer();
    this.meterProvider = b.meterProvider;
    this.metrics =
        new WorkerMetrics(
            meterProvider != null
                ? meterProvider
                : io.opentelemetry.api.metrics.MeterProvider.noop());
    this.failFast = b.failFast;
    this.workerId = b.workerId;
    this.labels = Map.copyOf(b.labels);
    this.concurrency = b.concurrency;
    this.leaseDuration = b.leaseDuration;
    this.pollWait = b.pollWait;
    this.heartbeatInterval =
        b.heartbeatInterval != null ? b.heartbeatInterval : leaseDuration.dividedBy(3);
    this.onError = b.onError;
    this.leaseNext = b.leaseNext;
    this.stopTimeout = b.stopTimeout;
    this.stopGrace = b.stopGrace;
    this.slots = new Semaphore(concurrency);
    this.limits = new QueueLimits(b.queueConcurrency);
    if (b.executor != null) {
      this.handlers = b.executor;
      this.ownPool = null;
    } else {
      AtomicInteger n = new AtomicInteger();
      this.ownPool =
          Executors.newFixedThreadPool(
              concurrency, r -> daemon(r, "taskbroker-handler-" + n.incrementAndGet()));
      this.handlers = ownPool;
    }
    // Two threads: a heartbeat waiting on a frozen broker must not delay a lease's expiry.
    AtomicInteger t = new AtomicInteger();
    this.timers =
        Executors.newScheduledThreadPool(2, r -> daemon(r, "taskbroker-timers-" + t.incrementAndGet()));
    this.leaseThread = daemon(this::runLoop, "taskbroker-lease");
    this.completerThread =
        Executors.newSingleThreadExecutor(r -> daemon(r, "taskbroker-completer"));
    this.completer = new Completer(broker, () -> metrics, completerThread);
    this.heartbeats =
        new WorkerHeartbeats(
            broker, workerId, leaseDuration, heartbeatInterval, running, timers, () -> metrics, onError);
    this.settler = new WorkerSettler(broker, completer, () -> metrics, () -> abandoned, onError);
  }

  /** The stop timeout {@link Worker#close()} stops with. */
  Duration stopTimeout() {
    return stopTimeout;
  }

  /** The queues this worker leases from, in registration order. */
  List<String> queues() {
    return queues;
  }

  /**
   * Completions waiting behind the Complete or CompleteMany call in flight; they go as one
   * CompleteMany when it returns.
   */
  int queuedCompletions() {
    return completer.queued();
  }

  /** Started and not yet stopped (for lifecycle frameworks). */
  boolean isRunning() {
    synchronized (lock) {
      return started && stopped.getCount() > 0 && !stopping;
    }
  }

  String workerId() {
    return workerId;
  }

  /** The labels sent with every Lease (routing). */
  Map<String, String> labels() {
    return labels;
  }

  /** Tasks being worked on right now. */
  int inFlight() {
    return running.size();
  }

  /** How many tasks came back in a settle's next_tasks (and ran) so far. */
  long leaseNextTasks() {
    return leaseNextTasks.get();
  }

  /** Starts leasing and heartbeating in background threads. */
  void start() {
    synchronized (lock) {
      if (started) {
        return;
      }
      started = true;
      if (meterProvider == null) {
        // Looked up now rather than when built, so an SDK the application installs in between
        // counts.
        metrics = new WorkerMetrics(Worker.globalMeterProvider());
      }
      long every = Math.max(heartbeatInterval.toMillis(), 100);
      timers.scheduleWithFixedDelay(heartbeats::beat, every, every, TimeUnit.MILLISECONDS);
      leaseThread.start();
    }
  }

  /**
   * Stops leasing and waits up to {@code timeout} for running tasks to finish; then flags them
   * {@link TaskContext.AbortKind#STOPPING}, interrupts their threads and waits a little more.
   * Heartbeats go on until the last task is settled. A worker never started stops at once. An
   * interrupt while waiting returns early and stays set on the thread.
   */
  void stop(Duration timeout) {
    synchronized (lock) {
      if (!started) {
        started = true; // never starts now
        stopping = true;
        shutdownExecutors();
        stopped.countDown();
        return;
      }
      if (!stopping) {
        stopTimeout = timeout;
        stopping = true;
        stopRequested.countDown();
        Context.CancellableContext inFlight = poll.get();
        if (inFlight != null) {
          inFlight.cancel(null);
        }
      }
    }
    try {
      stopped.await();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /**
   * Blocks until the worker has stopped and drained.
   *
   * @throws WorkerStoppedException when the broker refused the worker
   */
  void awaitStopped() {
    try {
      stopped.await();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return;
    }
    RuntimeException f = failure;
    if (f != null) {
      throw f;
    }
  }

  /** Why the worker stopped on its own, if it did. */
  java.util.Optional<RuntimeException> failure() {
    return java.util.Optional.ofNullable(failure);
  }

  private void runLoop() {
    try {
      leaseLoop();
    } catch (RuntimeException e) {
      failure = e;
      LOG.log(System.Logger.Level.ERROR, "taskbroker worker stopped: " + e.getMessage());
    } finally {
      stopping = true;
      drain();
      shutdownExecutors();
      stopped.countDown();
    }
  }

  /**
   * Waits for every slot to be free again; at the stop timeout interrupts the handlers, and after
   * the stop grace hands back the tasks of those still running (their threads are left behind,
   * their results discarded). Settles still retried after that are abandoned.
   */
  private void drain() {
    try {
      if (!slots.tryAcquire(concurrency, stopTimeout.toMillis(), TimeUnit.MILLISECONDS)) {
        stopTimedOut = true;
        running.values().forEach(ctx -> ctx.abort(TaskContext.AbortKind.STOPPING));
        if (!slots.tryAcquire(concurrency, stopGrace.toMillis(), TimeUnit.MILLISECONDS)) {
          handBackRunning();
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } finally {
      abandoned = true;
    }
  }

  /** Hands back, in parallel, every task whose handler is still running (spec point 11). */
  private void handBackRunning() throws InterruptedException {
    List<TaskContext> left = running.values().stream().filter(TaskContext::takeForHandBack).toList();
    List<Thread> calls = new java.util.ArrayList<>();
    for (TaskContext ctx : left) {
      Thread th = daemon(() -> handBack(ctx), "taskbroker-hand-back");
      th.start();
      calls.add(th);
    }
    for (Thread th : calls) {
      th.join(Worker.HAND_BACK_TIMEOUT.toMillis() + 500);
    }
  }

  private void handBack(TaskContext ctx) {
    metrics.task(ctx.queue(), WorkerMetrics.Outcome.FAILED, ctx.ranFor());
    try {
      metrics.settleCall("Fail");
      broker
          .withDeadlineAfter(Worker.HAND_BACK_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS)
          .fail(
              FailRequest.newBuilder()
                  .setTaskId(ctx.taskId())
                  .setLeaseToken(ctx.task().getLeaseToken())
                  .setErrorMessage("worker stopped")
                  .setRetryAfter(ProtoTime.duration(Duration.ZERO))
                  .build());
      LOG.log(
          System.Logger.Level.WARNING,
          "taskbroker worker: task " + ctx.taskId() + " handed back at stop: its handler did not return in time");
    } catch (RuntimeException e) {
      LOG.log(
          System.Logger.Level.WARNING,
          "taskbroker worker: task " + ctx.taskId() + ": hand-back at stop failed ("
              + ErrorDetails.plain(e) + "); it returns when its lease expires");
    }
  }

  private void shutdownExecutors() {
    timers.shutdownNow();
    completerThread.shutdownNow();
    if (ownPool != null) {
      ownPool.shutdownNow();
    }
  }

  private void leaseLoop() {
    int failures = 0;
    while (!stopping) {
      try {
        // A bounded wait, so a stop is noticed even with every slot busy.
        if (!slots.tryAcquire(200, TimeUnit.MILLISECONDS)) {
          continue;
        }
      } catch (InterruptedException e) {
        return;
      }
      int free = 1 + slots.drainPermits();
      QueueLimits.Plan plan = limits.reserve(queues, free);
      if (plan.maxTasks() == 0) { // every queue is at its own limit: wait for one to free a slot
        slots.release(free);
        try {
          limits.awaitFreed(200);
        } catch (InterruptedException e) {
          return;
        }
        continue;
      }
      slots.release(free - plan.maxTasks());
      free = plan.maxTasks();
      Context.CancellableContext ctx = Context.current().withCancellation();
      poll.set(ctx);
      List<LeasedTask> tasks;
      try {
        if (stopping) { // stop() may have run before poll was set
          slots.release(free);
          return;
        }
        LeaseRequest req =
            LeaseRequest.newBuilder()
                .setWorkerId(workerId)
                .addAllQueues(plan.queues())
                .setMaxTasks(free)
                .setLeaseDuration(ProtoTime.duration(leaseDuration))
                .setWait(ProtoTime.duration(pollWait))
                .putAllLabels(labels)
                .build();
        // The deadline leaves the broker room to answer an empty long poll.
        long deadlineMs = pollWait.toMillis() + 5_000;
        tasks =
            ctx.call(
                () ->
                    broker
                        .withDeadlineAfter(deadlineMs, TimeUnit.MILLISECONDS)
                        .lease(req)
                        .getTasksList());
        failures = 0;
      } catch (Exception e) {
        plan.got().accept(List.of());
        slots.release(free);
        if (stopping) {
          return;
        }
        Status.Code code = Status.fromThrowable(e).getCode();
        if (ErrorDetails.stopsWorker(code)) {
          throw new WorkerStoppedException("lease refused: " + ErrorDetails.plain(e), e);
        }
        if (failFast && ErrorDetails.isConfigurationError(e)) {
          throw new WorkerStoppedException(
              "cannot use the broker as configured (failFast): "
                  + ErrorDetails.configurationProblem(e) + " (" + ErrorDetails.plain(e) + ")",
              e);
        }
        onError.accept("lease", e);
        try {
          if (stopRequested.await(Backoff.delay(failures).toMillis(), TimeUnit.MILLISECONDS)) {
            return;
          }
        } catch (InterruptedException ie) {
          return;
        }
        failures++;
        continue;
      } finally {
        poll.set(null);
        ctx.cancel(null);
      }
      plan.got().accept(tasks);
      slots.release(free - tasks.size());
      for (LeasedTask task : tasks) {
        dispatch(task);
      }
    }
  }

  private void dispatch(LeasedTask task) {
    TaskContext tc = admit(task);
    try {
      handlers.execute(() -> runInSlot(tc));
    } catch (RejectedExecutionException e) {
      running.remove(task.getTaskId());
      slots.release();
      onError.accept("run task " + task.getTaskId() + " (executor refused it)", e);
    }
  }

  /**
   * Runs {@code first} and then, in the same slot (its permit held throughout), each task its
   * settle leased (lease_next); releases the slot when a settle brings none.
   */
  private void runInSlot(TaskContext first) {
    java.util.ArrayDeque<TaskContext> queue = new java.util.ArrayDeque<>();
    queue.add(first);
    try {
      while (!queue.isEmpty()) {
        TaskContext tc = queue.poll();
        List<LeasedTask> next = List.of();
        tc.bind(Thread.currentThread());
        java.util.concurrent.ScheduledFuture<?> watch = heartbeats.watchExpiry(tc);
        if (stopTimedOut) {
          tc.abort(TaskContext.AbortKind.STOPPING);
        }
        io.opentelemetry.context.Scope scope = tc.traceContext().makeCurrent();
        try {
          next = execute(tc, watch);
        } finally {
          if (watch != null) {
            watch.cancel(false);
          }
          scope.close();
          tc.bind(null);
          // Remove this context only: a failed task retried at once can come back with its id.
          running.remove(tc.taskId(), tc);
        }
        limits.pass(tc.queue(), next);
        for (LeasedTask task : next) {
          leaseNextTasks.incrementAndGet();
          queue.add(admit(task));
        }
      }
    } finally {
      // Not reached with tasks left in the queue unless execute threw an Error; those leases
      // then run out and the broker hands the tasks out again.
      queue.forEach(tc -> running.remove(tc.taskId(), tc));
      slots.release();
    }
  }

  /** Registers a leased task as running (its heartbeats start) and arms its deadline. */
  private TaskContext admit(LeasedTask task) {
    TaskContext tc = new TaskContext(broker, task, leaseDuration, serializer);
    running.put(task.getTaskId(), tc);
    if (task.hasDeadline()) {
      long ms = Duration.between(Instant.now(), ProtoTime.instant(task.getDeadline())).toMillis();
      try {
        timers.schedule(
            () -> tc.abort(TaskContext.AbortKind.DEADLINE), Math.max(ms, 0), TimeUnit.MILLISECONDS);
      } catch (RejectedExecutionException e) {
        // Stopping: the timers are gone, and so is the need for them.
      }
    }
    return tc;
  }

  /** The lease_next a settle carries: the freed slot's task, no wait; null when off or stopping. */
  private LeaseRequest nextLease(String queue) {
    List<String> asked = limits.nextQueues(queues, queue);
    if (!leaseNext || stopping || asked.isEmpty()) {
      return null;
    }
    return LeaseRequest.newBuilder()
        .setWorkerId(workerId)
        .addAllQueues(asked)
        .setMaxTasks(1)
        .setLeaseDuration(ProtoTime.duration(leaseDuration))
        .putAllLabels(labels)
        .build();
  }

  /** Runs the handler and settles the task; returns the tasks the settle leased (lease_next). */
  private List<LeasedTask> execute(TaskContext ctx, java.util.concurrent.ScheduledFuture<?> watch) {
    byte[] result = null;
    Throwable error = null;
    boolean returned = false;
    try {
      Object value = Tracing.process(ctx, metrics, () -> runChain(ctx));
      returned = true;
      result = WorkerFailures.encodeResult(serializer, ctx.queue(), value);
    } catch (Throwable t) {
      // StackOverflowError and other Errors too: the attempt fails with its cause instead of
      // the task waiting out its lease.
      error = t;
    } finally {
      if (watch != null) {
        watch.cancel(false);
      }
    }
    Duration ran = ctx.ranFor();
    // A hard stop or a deadline interrupts us; the report below must not be cut short by that.
    Thread.interrupted();
    if (!ctx.handlerReturnedNow()) {
      return List.of(); // handed back at stop (and counted then); another worker may run it now
    }
    if (ctx.abortKind().orElse(null) == TaskContext.AbortKind.LOST) {
      heartbeats.markLost(ctx, "a checkpoint answered LEASE_LOST");
      metrics.task(ctx.queue(), WorkerMetrics.Outcome.LEASE_LOST, ran);
      return List.of(); // Another holder may have the task now; nothing of ours would be accepted.
    }
    if (error != null) {
      WorkerFailures.logFailure(ctx, error, returned);
    }
    WorkerMetrics.Outcome intended =
        error == null
            ? WorkerMetrics.Outcome.SUCCEEDED
            : ctx.abortKind().orElse(null) == TaskContext.AbortKind.CANCELLED
                ? WorkerMetrics.Outcome.CANCELLED
                : WorkerMetrics.Outcome.FAILED;
    WorkerSettler.Settled settled = settler.settle(ctx, result, error, nextLease(ctx.queue()));
    metrics.task(ctx.queue(), settled.outcome() != null ? settled.outcome() : intended, ran);
    return settled.next();
  }

  /** The middleware chain around the queue's handler; the first registered is the outermost. */
  private Object runChain(TaskContext ctx) throws Exception {
    Registration reg = registry.get(ctx.queue());
    if (reg == null) {
      throw new TaskbrokerException("this worker has no handler for queue " + ctx.queue());
    }
    Middleware.Next next = () -> reg.invoker().invoke(ctx, serializer);
    for (int i = middleware.size() - 1; i >= 0; i--) {
      Middleware m = middleware.get(i);
      Middleware.Next inner = next;
      next = () -> m.handle(ctx, inner);
    }
    return next.proceed();
  }

  private static Thread daemon(Runnable r, String name) {
    Thread t = new Thread(r, name);
    t.setDaemon(true);
    return t;
  }
}
