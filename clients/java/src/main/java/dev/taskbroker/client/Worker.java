package dev.taskbroker.client;

import com.google.protobuf.ByteString;
import dev.taskbroker.v1.BrokerServiceGrpc;
import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.FailRequest;
import dev.taskbroker.v1.HeartbeatRequest;
import dev.taskbroker.v1.HeartbeatResponse;
import dev.taskbroker.v1.LeaseRef;
import dev.taskbroker.v1.LeaseRequest;
import dev.taskbroker.v1.LeaseStatus;
import dev.taskbroker.v1.LeasedTask;
import io.grpc.Context;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
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
 * Runs handlers over tasks leased from a broker: one worker, any number of queues, a handler
 * each ({@link Builder#handle(String, Class, TypedHandler)} with a typed payload, {@link
 * Builder#handle(String, TaskHandler)} with raw bytes), one Lease call for all of them.
 *
 * <pre>{@code
 * Worker worker = Worker.builder(tb)
 *     .handle("emails", Email.class, (task, email) -> new Sent(mailer.send(email)))
 *     .handle("thumbnails", Image.class, (task, image) -> thumbnails.make(image))
 *     .middleware((task, next) -> { ...; return next.proceed(); })
 *     .concurrency(8)
 *     .build();
 * worker.stopOnShutdown();
 * worker.run();
 * }</pre>
 *
 * <ul>
 *   <li>One lease thread long-polls Lease for exactly as many tasks as there are free slots.
 *   <li>One heartbeat thread extends every running lease in a single Heartbeat call, about every
 *       third of the lease duration, and flags a task's context when its lease is lost or an
 *       operator asks to cancel it.
 *   <li>A returned result is reported with Complete; a {@link PermanentException} with
 *       Fail(non_retryable); any other exception with Fail, so the retry policy applies.
 *   <li>{@link #stop(Duration)} stops leasing and drains; after the timeout it flags and
 *       interrupts the handlers still running, and hands back (Fail, retryable, retry_after 0:
 *       READY at once) the tasks of those still running after the stop grace (1 s); it returns
 *       within the timeout + the grace + 1 s for the hand-back. {@link #stopOnShutdown()} does that
 *       on SIGTERM with the builder's {@link Builder#stopTimeout} and {@link Builder#stopGrace}.
 *   <li>A Complete or Fail that meets an unreachable broker is retried with backoff until the
 *       lease's expiry is near (the lease token stays valid across a broker restart).
 *   <li>When a lease expires by the local clock (heartbeats unanswered), the task's context is
 *       flagged {@link TaskContext.AbortKind#LOST} and its handler interrupted.
 *   <li>A Lease refused with UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT or
 *       UNIMPLEMENTED stops the worker ({@link WorkerStoppedException}); other errors are retried
 *       after a jittered backoff ({@link Backoff}).
 *   <li>A task's deadline flags its context {@link TaskContext.AbortKind#DEADLINE} and interrupts
 *       the handler.
 *   <li>With {@link Builder#leaseNext(boolean) leaseNext} (the default), a finished task's Complete
 *       or Fail also leases the next task for the slot it frees ({@code lease_next} on the
 *       settle, no wait), which then runs like a leased one: two calls per task instead of three.
 *       When none comes back, the long-poll Lease goes on. Never asked for while stopping.
 *   <li>Completes share calls: while one is in flight the next ones queue and go as one
 *       CompleteMany when it returns; a lone one is sent at once ({@link #queuedCompletions()}).
 *   <li>Metrics go to the OpenTelemetry meter {@code taskbroker} ({@link Builder#meterProvider}).
 *   <li>With {@link Builder#failFast(boolean) failFast}, a Lease that fails for a reason retrying
 *       cannot fix (TLS handshake, plaintext against TLS or the reverse, not a gRPC server) stops
 *       the worker at once instead of being retried.
 * </ul>
 *
 * <p>Defaults follow docs/client-spec.md: concurrency 4, poll wait 10 s, lease 30 s, heartbeat
 * every lease/3, stop timeout 30 s.
 */
public final class Worker implements AutoCloseable {
  public static final int DEFAULT_CONCURRENCY = 4;
  public static final Duration DEFAULT_POLL_WAIT = Duration.ofSeconds(10);
  public static final Duration DEFAULT_LEASE_DURATION = Duration.ofSeconds(30);
  /** The spec's stop timeout (docs/client-spec.md point 1). */
  public static final Duration DEFAULT_STOP_TIMEOUT = Duration.ofSeconds(30);
  /**
   * The stop timeout of {@link #close()} and {@link #stopOnShutdown()} unless {@link
   * Builder#stopTimeout} says otherwise: with the default stop grace and the 1 s hand-back, a stop
   * takes at most 25 s, inside Kubernetes' default 30 s termination grace period.
   */
  public static final Duration DEFAULT_SHUTDOWN_STOP_TIMEOUT = Duration.ofSeconds(23);
  /** How long handlers have to return once a stop timed out and interrupted them. */
  public static final Duration DEFAULT_STOP_GRACE = Duration.ofSeconds(1);
  /** The deadline of a hand-back's Fail at stop. */
  static final Duration HAND_BACK_TIMEOUT = Duration.ofSeconds(1);
  /** A settle is not tried again when the next try would start within this of the lease's expiry. */
  static final Duration SETTLE_MARGIN = Duration.ofSeconds(1);

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

  private Worker(Builder b) {
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
  }

  /** A worker whose queues and handlers are added with {@link Builder#handle} or {@link Builder#register}. */
  public static Builder builder(Taskbroker taskbroker) {
    return new Builder(taskbroker, null);
  }

  /** A worker running one raw-bytes {@code handler} for every queue given to {@link Builder#queues}. */
  public static Builder builder(Taskbroker taskbroker, TaskHandler handler) {
    return new Builder(taskbroker, java.util.Objects.requireNonNull(handler, "handler"));
  }

  /** The queues this worker leases from, in registration order. */
  public List<String> queues() {
    return queues;
  }

  /**
   * Completions waiting behind the Complete or CompleteMany call in flight; they go as one
   * CompleteMany when it returns.
   */
  public int queuedCompletions() {
    return completer.queued();
  }

  /** Started and not yet stopped (for lifecycle frameworks). */
  public synchronized boolean isRunning() {
    return started && stopped.getCount() > 0 && !stopping;
  }

  public String workerId() {
    return workerId;
  }

  /** The labels sent with every Lease (routing). */
  public Map<String, String> labels() {
    return labels;
  }

  /** Tasks being worked on right now. */
  public int inFlight() {
    return running.size();
  }

  /** How many tasks came back in a settle's next_tasks (and ran) so far. */
  public long leaseNextTasks() {
    return leaseNextTasks.get();
  }

  /**
   * The global OpenTelemetry's meter provider, looked up without fixing the global to a no-op the
   * way {@code GlobalOpenTelemetry.get()} does when nothing is installed yet ({@code getOrNoop},
   * OpenTelemetry API 1.57 and later). An older API, as the Spring Boot 3.x BOMs pin, has no such
   * look-up: then the worker records nowhere unless given {@code meterProvider(...)}.
   */
  static io.opentelemetry.api.metrics.MeterProvider globalMeterProvider() {
    try {
      return io.opentelemetry.api.GlobalOpenTelemetry.getOrNoop().getMeterProvider();
    } catch (NoSuchMethodError olderApi) {
      LOG.log(
          System.Logger.Level.INFO,
          "OpenTelemetry API before 1.57: the worker's metrics go to meterProvider(...) only");
      return io.opentelemetry.api.metrics.MeterProvider.noop();
    }
  }

  /** Starts leasing and heartbeating in background threads. */
  public synchronized void start() {
    if (started) {
      return;
    }
    started = true;
    if (meterProvider == null) {
      // Looked up now rather than when built, so an SDK the application installs in between
      // counts.
      metrics = new WorkerMetrics(globalMeterProvider());
    }
    long every = Math.max(heartbeatInterval.toMillis(), 100);
    timers.scheduleWithFixedDelay(this::heartbeatOnce, every, every, TimeUnit.MILLISECONDS);
    leaseThread.start();
  }

  /**
   * Starts and blocks until the worker has stopped (by {@link #stop(Duration)}, {@link #close()},
   * the shutdown hook of {@link #stopOnShutdown()}) and drained.
   *
   * @throws WorkerStoppedException when the broker refused the worker (wrong token, bad queue)
   */
  public void run() {
    start();
    awaitStopped();
  }

  /**
   * Registers a JVM shutdown hook that stops this worker and drains it (SIGTERM from Kubernetes,
   * Ctrl-C). Returns the hook thread, for {@code Runtime.removeShutdownHook}.
   */
  public Thread stopOnShutdown() {
    Thread hook = new Thread(this::close, "taskbroker-shutdown");
    Runtime.getRuntime().addShutdownHook(hook);
    return hook;
  }

  /**
   * Stops leasing and waits up to {@code timeout} for running tasks to finish; then flags them
   * {@link TaskContext.AbortKind#STOPPING}, interrupts their threads and waits a little more.
   * Heartbeats go on until the last task is settled. A worker never started stops at once. An
   * interrupt while waiting returns early and stays set on the thread.
   */
  public void stop(Duration timeout) {
    synchronized (this) {
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
  public void awaitStopped() {
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
  public java.util.Optional<RuntimeException> failure() {
    return java.util.Optional.ofNullable(failure);
  }

  /**
   * Stops with the builder's stop timeout (default 23 s: at most 25 s in all, see {@link
   * #DEFAULT_SHUTDOWN_STOP_TIMEOUT}); returns at once for a worker never started.
   */
  @Override
  public void close() {
    stop(stopTimeout);
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
      th.join(HAND_BACK_TIMEOUT.toMillis() + 500);
    }
  }

  private void handBack(TaskContext ctx) {
    metrics.task(ctx.queue(), WorkerMetrics.Outcome.FAILED, ctx.ranFor());
    try {
      metrics.settleCall("Fail");
      broker
          .withDeadlineAfter(HAND_BACK_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS)
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
        java.util.concurrent.ScheduledFuture<?> watch = watchExpiry(tc);
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

  /**
   * Flags the task LOST (and interrupts its handler) when its lease expires by the local clock
   * without an extension, whether or not the broker answers heartbeats.
   */
  private java.util.concurrent.ScheduledFuture<?> watchExpiry(TaskContext tc) {
    long ms = Math.max(Duration.between(Instant.now(), tc.leaseExpiresAt()).toMillis(), 0);
    try {
      return timers.schedule(
          () -> {
            if (tc.handlerReturned()) {
              return;
            }
            if (!tc.leaseExpiresAt().isAfter(Instant.now())) {
              if (tc.task().hasDeadline()
                  && !ProtoTime.instant(tc.task().getDeadline()).isAfter(tc.leaseExpiresAt())) {
                tc.abort(TaskContext.AbortKind.DEADLINE); // the lease ends at the task's deadline
                return;
              }
              markLost(tc, "the lease expired by the local clock");
            } else {
              watchExpiry(tc); // extended meanwhile: look again at the new expiry
            }
          },
          ms,
          TimeUnit.MILLISECONDS);
    } catch (RejectedExecutionException e) {
      return null; // stopping: the timers are gone
    }
  }

  /** Flags the task LOST, interrupts its handler, logs it once (WARN) and counts it. */
  private void markLost(TaskContext tc, String why) {
    if (tc.markLost()) {
      metrics.leaseLost(tc.queue());
      LOG.log(
          System.Logger.Level.WARNING,
          "taskbroker worker: task " + tc.taskId() + ": lease lost (" + why + "); not settled by this worker");
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
      result = encodeResult(ctx.queue(), value);
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
      markLost(ctx, "a checkpoint answered LEASE_LOST");
      metrics.task(ctx.queue(), WorkerMetrics.Outcome.LEASE_LOST, ran);
      return List.of(); // Another holder may have the task now; nothing of ours would be accepted.
    }
    if (error != null) {
      logFailure(ctx, error, returned);
    }
    WorkerMetrics.Outcome intended =
        error == null
            ? WorkerMetrics.Outcome.SUCCEEDED
            : ctx.abortKind().orElse(null) == TaskContext.AbortKind.CANCELLED
                ? WorkerMetrics.Outcome.CANCELLED
                : WorkerMetrics.Outcome.FAILED;
    Settled settled = settle(ctx, result, error);
    metrics.task(ctx.queue(), settled.outcome != null ? settled.outcome : intended, ran);
    return settled.next;
  }

  /**
   * Logs a failed attempt (docs/client-spec.md, point 11, Logging): a {@link RetryableException}
   * or {@link PermanentException} the handler threw (a payload that does not decode is one) at
   * WARNING in one line without a stack, saying whether the task will be retried or goes DEAD (a
   * PermanentException, or the last of max_attempts); anything else it threw, unexpected, at
   * ERROR with its stack; a value it returned that cannot be encoded ({@code returned}) at ERROR,
   * one line naming the type.
   */
  private static void logFailure(TaskContext ctx, Throwable error, boolean returned) {
    String prefix = "taskbroker worker: task " + ctx.taskId() + ": ";
    int attempt = ctx.attempt();
    int max = ctx.task().getMaxAttempts();
    if (returned) {
      LOG.log(System.Logger.Level.ERROR, prefix + error.getMessage());
    } else if (error instanceof PermanentException) {
      LOG.log(
          System.Logger.Level.WARNING,
          prefix + "failed permanently, the task goes DEAD: " + error.getMessage());
    } else if (!(error instanceof RetryableException)) {
      LOG.log(
          System.Logger.Level.ERROR,
          prefix + "handler threw " + error.getClass().getName() + ": " + error.getMessage(),
          error);
    } else if (max > 0 && attempt >= max) {
      LOG.log(
          System.Logger.Level.WARNING,
          prefix + "attempt " + attempt + " of " + max + " failed, the task goes DEAD: "
              + error.getMessage());
    } else {
      LOG.log(
          System.Logger.Level.WARNING,
          prefix + "attempt " + attempt + " of " + max + " failed, the task will be retried: "
              + error.getMessage());
    }
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

  /**
   * The result bytes of a handler's value: none for null, bytes as they are, anything else through
   * the serializer. A value it cannot encode fails the attempt (retryable: a fixed deploy may
   * succeed), with a message naming the type.
   */
  private byte[] encodeResult(String queue, Object value) {
    return encodeResult(serializer, queue, value);
  }

  static byte[] encodeResult(Serializer serializer, String queue, Object value) {
    if (value == null) {
      return null;
    }
    if (value instanceof byte[] bytes) {
      return bytes;
    }
    try {
      return serializer.encode(value);
    } catch (RuntimeException e) {
      throw new TaskbrokerException(
          "queue " + queue + ": handler returned " + value.getClass().getSimpleName()
              + ", which cannot be encoded: " + String.valueOf(e.getMessage()).replaceAll("\\s+", " "),
          e);
    }
  }

  /** What a settle brought: the slot's next tasks, and the outcome when it is not the intended one. */
  private record Settled(List<LeasedTask> next, WorkerMetrics.Outcome outcome) {
    static Settled ended(WorkerMetrics.Outcome outcome) {
      return new Settled(List.of(), outcome);
    }
  }

  /**
   * Reports the attempt: Complete (through the completer, which batches) or Fail. Complete and
   * Fail are idempotent for the same lease token, which stays valid across a broker restart: a
   * settle that met an unreachable broker is sent again with backoff until the next try would
   * start within the settle margin of the lease's expiry.
   */
  private Settled settle(TaskContext ctx, byte[] result, Throwable error) {
    LeaseRequest next = nextLease(ctx.queue());
    String call = error == null ? "complete" : "fail";
    for (int failures = 0; ; failures++) {
      try {
        if (error == null) {
          CompleteRequest.Builder req =
              CompleteRequest.newBuilder()
                  .setTaskId(ctx.taskId())
                  .setLeaseToken(ctx.task().getLeaseToken())
                  .setResult(result == null ? ByteString.EMPTY : ByteString.copyFrom(result));
          if (next != null) {
            req.setLeaseNext(next);
          }
          return new Settled(completer.complete(req.build()), null);
        }
        FailRequest.Builder req = failRequest(ctx, error).toBuilder();
        if (ctx.abortKind().orElse(null) == TaskContext.AbortKind.STOPPING) {
          req.setRetryAfter(ProtoTime.duration(Duration.ZERO)); // hand back: READY at once
        }
        if (next != null) {
          req.setLeaseNext(next);
        }
        metrics.settleCall("Fail");
        return new Settled(
            broker.withDeadlineAfter(10, TimeUnit.SECONDS).fail(req.build()).getNextTasksList(),
            null);
      } catch (StatusRuntimeException e) {
        String id = ctx.taskId();
        if (ErrorDetails.isLeaseLost(e)) {
          LOG.log(
              System.Logger.Level.WARNING,
              "taskbroker worker: task " + id + ": " + call
                  + " refused: lease lost (LEASE_LOST); another attempt may run");
          metrics.leaseLost(ctx.queue());
          return Settled.ended(WorkerMetrics.Outcome.LEASE_LOST);
        }
        if (abandoned) {
          LOG.log(
              System.Logger.Level.WARNING,
              "taskbroker worker: task " + id + ": " + call + " abandoned: the worker stopped while it was retried");
          return Settled.ended(WorkerMetrics.Outcome.FAILED);
        }
        Status.Code code = e.getStatus().getCode();
        if (code != Status.Code.UNAVAILABLE && code != Status.Code.DEADLINE_EXCEEDED) {
          onError.accept("report task " + id, e);
          return Settled.ended(WorkerMetrics.Outcome.FAILED);
        }
        Duration pause = Backoff.delay(failures);
        if (Instant.now().plus(pause).plus(SETTLE_MARGIN).isAfter(ctx.leaseExpiresAt())) {
          LOG.log(
              System.Logger.Level.WARNING,
              "taskbroker worker: task " + id + ": " + call + " given up at the lease's expiry ("
                  + ErrorDetails.plain(e) + "); the broker will hand the task out again");
          metrics.leaseLost(ctx.queue());
          return Settled.ended(WorkerMetrics.Outcome.LEASE_LOST);
        }
        LOG.log(
            System.Logger.Level.WARNING,
            "taskbroker worker: task " + id + ": " + call + " failed (" + ErrorDetails.plain(e)
                + "); retrying in " + pause.toMillis() + " ms");
        try {
          Thread.sleep(pause.toMillis());
        } catch (InterruptedException ie) {
          Thread.currentThread().interrupt();
          return Settled.ended(WorkerMetrics.Outcome.FAILED);
        }
        metrics.settleRetry(ctx.queue());
      }
    }
  }

  static FailRequest failRequest(TaskContext ctx, Throwable error) {
    String message = error.getMessage() != null ? error.getMessage() : error.getClass().getName();
    FailRequest.Builder req =
        FailRequest.newBuilder()
            .setTaskId(ctx.taskId())
            .setLeaseToken(ctx.task().getLeaseToken())
            .setErrorMessage(message)
            .setNonRetryable(error instanceof PermanentException);
    if (error instanceof RetryableException r) {
      r.retryAfter().ifPresent(d -> req.setRetryAfter(ProtoTime.duration(d)));
      req.setPreferSameWorker(r.preferSameWorker());
      r.cooldown().ifPresent(c -> req.setCooldown(CooldownInfo.proto(c)));
    }
    return req.build();
  }

  private void heartbeatOnce() {
    List<TaskContext> live =
        running.values().stream()
            .filter(c -> c.abortKind().orElse(null) != TaskContext.AbortKind.LOST && !c.handedBack())
            .toList();
    if (live.isEmpty()) {
      return;
    }
    HeartbeatRequest.Builder req =
        HeartbeatRequest.newBuilder()
            .setWorkerId(workerId)
            .setExtendBy(ProtoTime.duration(leaseDuration));
    for (TaskContext c : live) {
      req.addLeases(
          LeaseRef.newBuilder().setTaskId(c.taskId()).setLeaseToken(c.task().getLeaseToken()));
    }
    try {
      HeartbeatResponse res =
          broker
              .withDeadlineAfter(
                  Math.max(heartbeatInterval.toMillis(), 1_000), TimeUnit.MILLISECONDS)
              .heartbeat(req.build());
      for (LeaseStatus status : res.getLeasesList()) {
        TaskContext c = running.get(status.getTaskId());
        if (c == null) {
          continue;
        }
        if (status.getLost()) {
          markLost(c, "a heartbeat answered lost");
        } else if (status.getCancelRequested()) {
          c.abort(TaskContext.AbortKind.CANCELLED);
        }
        if (status.hasLeaseExpiresAt()) {
          c.extendedTo(ProtoTime.instant(status.getLeaseExpiresAt()));
        }
      }
    } catch (RuntimeException e) {
      // A scheduled task that throws is never run again: catch everything here.
      onError.accept("heartbeat", e);
      Instant now = Instant.now();
      for (TaskContext c : live) {
        if (!c.leaseExpiresAt().isAfter(now)) {
          markLost(c, "the lease expired without a successful heartbeat");
        }
      }
    }
  }

  private static Thread daemon(Runnable r, String name) {
    Thread t = new Thread(r, name);
    t.setDaemon(true);
    return t;
  }

  /** Configures a {@link Worker}; only the queues and their handlers are required. */
  public static final class Builder {
    private final Taskbroker taskbroker;
    private final TaskHandler handler;
    private List<String> queues = List.of();
    private final Map<String, Registration> registrations = new java.util.LinkedHashMap<>();
    private final Map<String, Integer> queueConcurrency = new java.util.HashMap<>();
    private final List<Middleware> middleware = new java.util.ArrayList<>();
    private Serializer serializer;
    private io.opentelemetry.api.metrics.MeterProvider meterProvider;
    private boolean failFast;
    private String workerId = defaultWorkerId();
    private final Map<String, String> labels = new java.util.TreeMap<>();
    private int concurrency = DEFAULT_CONCURRENCY;
    private Duration leaseDuration = DEFAULT_LEASE_DURATION;
    private Duration pollWait = DEFAULT_POLL_WAIT;
    private Duration heartbeatInterval;
    private Executor executor;
    private boolean leaseNext = true;
    private Duration stopTimeout = DEFAULT_SHUTDOWN_STOP_TIMEOUT;
    private Duration stopGrace = DEFAULT_STOP_GRACE;
    private BiConsumer<String, Throwable> onError =
        (during, e) ->
            LOG.log(
                System.Logger.Level.WARNING,
                "taskbroker worker: " + during + ": " + ErrorDetails.plain(e));

    private Builder(Taskbroker taskbroker, TaskHandler handler) {
      this.taskbroker = taskbroker;
      this.handler = handler;
    }

    /**
     * Queues whose tasks go to the handler given to {@link Worker#builder(Taskbroker,
     * TaskHandler)}. With {@link Worker#builder(Taskbroker)}, use {@link #handle} instead.
     */
    public Builder queues(String... queues) {
      this.queues = List.of(queues);
      return this;
    }

    /**
     * Tasks of {@code queue} go to {@code handler} with their payload decoded into a {@code T} by
     * the serializer (JSON by default); its return value is encoded as the result. A payload
     * that does not decode fails the attempt at once, non-retryable, naming the queue and type.
     */
    public <T> Builder handle(String queue, Class<T> type, TypedHandler<? super T, ?> handler) {
      return register(Registration.of(queue, type, handler));
    }

    /** Tasks of {@code queue} go to {@code handler} as raw bytes. */
    public Builder handle(String queue, TaskHandler handler) {
      return register(Registration.raw(queue, handler));
    }

    /**
     * Declares {@code queue}'s policy (docs/client-spec.md point 20): its retry defaults fill the
     * unset retry fields of the queue's tasks submitted through this worker's {@link Taskbroker};
     * its non-retryable exceptions fail an attempt for good.
     */
    public Builder policy(String queue, HandlerPolicy policy) {
      taskbroker.setRetryDefaults(queue, policy.retry());
      if (policy.concurrency() > 0) {
        queueConcurrency.put(queue, policy.concurrency());
      }
      if (!policy.nonRetryable().isEmpty()) {
        middleware.add(policy.classifier(queue));
      }
      return this;
    }

    /** Tasks of {@code def}'s queue go to {@code handler}, under the definition's policy. */
    public <P> Builder task(TaskDef<P, ?> def, TypedHandler<? super P, ?> handler) {
      if (def.policy() != null) {
        policy(def.queue(), def.policy());
      }
      return handle(def.queue(), def.payloadType(), handler);
    }

    /** Adds one queue and its handler; one handler per queue. */
    public Builder register(Registration registration) {
      String q = registration.queue();
      if (registrations.containsKey(q)) {
        throw new IllegalArgumentException("queue " + q + " has a handler already");
      }
      registrations.put(q, registration);
      return this;
    }

    /** {@link #register} for each, in order (handlers a framework discovered). */
    public Builder registrations(java.util.Collection<Registration> registrations) {
      registrations.forEach(this::register);
      return this;
    }

    /**
     * Runs {@code m} around every handler call, on every queue; the first registered is the
     * outermost. See {@link Middleware}.
     */
    public Builder middleware(Middleware m) {
      middleware.add(java.util.Objects.requireNonNull(m, "middleware"));
      return this;
    }

    /** How typed payloads and results are encoded. Default: the client's ({@link JsonSerializer}). */
    public Builder serializer(Serializer serializer) {
      this.serializer = java.util.Objects.requireNonNull(serializer, "serializer");
      return this;
    }

    /**
     * Where the worker's metrics go (meter {@code taskbroker}). Default: the global
     * OpenTelemetry's ({@code GlobalOpenTelemetry}) as set when the worker starts; nothing is
     * recorded when the application installed no OpenTelemetry SDK.
     */
    public Builder meterProvider(io.opentelemetry.api.metrics.MeterProvider meterProvider) {
      this.meterProvider = java.util.Objects.requireNonNull(meterProvider, "meterProvider");
      return this;
    }

    /**
     * When on, a Lease that fails for a reason retrying cannot fix stops the worker at once
     * ({@link Worker#run()} throws {@link WorkerStoppedException} with one plain line): a TLS
     * handshake failure, plaintext against a TLS port or the reverse, a port that does not speak
     * gRPC, UNAUTHENTICATED, PERMISSION_DENIED. Off (the default), those are logged and retried
     * like an unreachable broker, except the codes that always stop a worker. Default false.
     */
    public Builder failFast(boolean failFast) {
      this.failFast = failFast;
      return this;
    }

    /** Shown in attempts and admin views. Default {@code <hostname>-<pid>}. */
    public Builder workerId(String workerId) {
      this.workerId = workerId;
      return this;
    }

    /**
     * A label of this worker ({@code label("gpu", "a100")}), sent with every Lease: a task
     * targeted at labels goes only to a worker carrying every pair. At most 32; the broker
     * refuses a bad one when the worker first leases (the worker then stops).
     */
    public Builder label(String key, String value) {
      java.util.Objects.requireNonNull(key, "key");
      java.util.Objects.requireNonNull(value, "value");
      if (!labels.containsKey(key) && labels.size() >= Routing.MAX_LABELS) {
        throw new IllegalArgumentException("at most " + Routing.MAX_LABELS + " labels");
      }
      labels.put(key, value);
      return this;
    }

    /** Every pair of {@code labels}, as {@link #label} one by one. */
    public Builder labels(Map<String, String> labels) {
      labels.forEach(this::label);
      return this;
    }

    /** Tasks run at once (handler threads), 1 to 256. Default 4. */
    public Builder concurrency(int concurrency) {
      if (concurrency < 1 || concurrency > 256) {
        throw new IllegalArgumentException("concurrency must be 1 to 256");
      }
      this.concurrency = concurrency;
      return this;
    }

    /** Lease and heartbeat extension length, 1 s to 24 h. Default 30 s. */
    public Builder leaseDuration(Duration leaseDuration) {
      this.leaseDuration = leaseDuration;
      return this;
    }

    /** Long-poll wait of each Lease call, 0 to 60 s. Default 10 s. */
    public Builder pollWait(Duration pollWait) {
      this.pollWait = pollWait;
      return this;
    }

    /** Time between heartbeats. Default a third of the lease duration. */
    public Builder heartbeatInterval(Duration heartbeatInterval) {
      this.heartbeatInterval = heartbeatInterval;
      return this;
    }

    /**
     * Runs handlers on {@code executor} instead of a fixed pool of {@code concurrency} threads;
     * on Java 21+ {@code Executors.newVirtualThreadPerTaskExecutor()}. The worker never runs more
     * than {@code concurrency} at once and does not shut the executor down.
     */
    public Builder executor(Executor executor) {
      this.executor = java.util.Objects.requireNonNull(executor, "executor");
      return this;
    }

    /**
     * Whether each Complete or Fail also leases the next task for the slot it frees (lease_next):
     * two calls per task instead of three. Default true.
     */
    public Builder leaseNext(boolean leaseNext) {
      this.leaseNext = leaseNext;
      return this;
    }

    /**
     * The stop timeout of {@link Worker#close()} and {@link Worker#stopOnShutdown()}: how long
     * running handlers may finish before they are interrupted. Default 23 s, so that with the
     * stop grace and the hand-back a stop takes at most 25 s (Kubernetes' grace period is 30 s).
     */
    public Builder stopTimeout(Duration stopTimeout) {
      if (stopTimeout.isNegative()) {
        throw new IllegalArgumentException("stopTimeout must not be negative");
      }
      this.stopTimeout = stopTimeout;
      return this;
    }

    /**
     * How long interrupted handlers may take to return after the stop timeout before their tasks
     * are handed back (Fail, retry_after 0) and the threads left behind. Default 1 s.
     */
    public Builder stopGrace(Duration stopGrace) {
      if (stopGrace.isNegative()) {
        throw new IllegalArgumentException("stopGrace must not be negative");
      }
      this.stopGrace = stopGrace;
      return this;
    }

    /** Receives errors the worker survives (broker unreachable, a report that failed). */
    public Builder onError(BiConsumer<String, Throwable> onError) {
      this.onError = onError;
      return this;
    }

    public Worker build() {
      registry(); // refuses a wrong set of queues here rather than when the worker starts
      return new Worker(this);
    }

    /** Every queue and its handler: those registered, and {@link #queues} for the raw handler. */
    private Map<String, Registration> registry() {
      Map<String, Registration> all = new java.util.LinkedHashMap<>(registrations);
      if (handler == null && !queues.isEmpty()) {
        throw new IllegalArgumentException(
            "queues(...) needs the handler of Worker.builder(taskbroker, handler); use handle(queue, ...)");
      }
      for (String q : queues) {
        if (all.putIfAbsent(q, Registration.raw(q, handler)) != null) {
          throw new IllegalArgumentException("queue " + q + " has a handler already");
        }
      }
      if (all.isEmpty()) {
        throw new IllegalArgumentException("a Worker needs at least one queue");
      }
      return all;
    }

    private static String defaultWorkerId() {
      String host;
      try {
        host = java.net.InetAddress.getLocalHost().getHostName();
      } catch (java.net.UnknownHostException e) {
        host = "unknown-host";
      }
      return host + "-" + ProcessHandle.current().pid();
    }
  }
}
