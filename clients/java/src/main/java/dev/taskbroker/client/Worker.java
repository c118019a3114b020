package dev.taskbroker.client;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executor;
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

  /** The state, threads and loops of this worker (WorkerRuntime). */
  private final WorkerRuntime rt;

  private Worker(Builder b) {
    this.rt = new WorkerRuntime(b, this);
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
    return rt.queues();
  }

  /**
   * Completions waiting behind the Complete or CompleteMany call in flight; they go as one
   * CompleteMany when it returns.
   */
  public int queuedCompletions() {
    return rt.queuedCompletions();
  }

  /** Started and not yet stopped (for lifecycle frameworks). */
  public synchronized boolean isRunning() {
    return rt.isRunning();
  }

  public String workerId() {
    return rt.workerId();
  }

  /** The labels sent with every Lease (routing). */
  public Map<String, String> labels() {
    return rt.labels();
  }

  /** Tasks being worked on right now. */
  public int inFlight() {
    return rt.inFlight();
  }

  /** How many tasks came back in a settle's next_tasks (and ran) so far. */
  public long leaseNextTasks() {
    return rt.leaseNextTasks();
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
    rt.start();
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
    rt.stop(timeout);
  }

  /**
   * Blocks until the worker has stopped and drained.
   *
   * @throws WorkerStoppedException when the broker refused the worker
   */
  public void awaitStopped() {
    rt.awaitStopped();
  }

  /** Why the worker stopped on its own, if it did. */
  public java.util.Optional<RuntimeException> failure() {
    return rt.failure();
  }

  /**
   * Stops with the builder's stop timeout (default 23 s: at most 25 s in all, see {@link
   * #DEFAULT_SHUTDOWN_STOP_TIMEOUT}); returns at once for a worker never started.
   */
  @Override
  public void close() {
    stop(rt.stopTimeout());
  }

  /** Configures a {@link Worker}; only the queues and their handlers are required. */
  public static final class Builder {
    final Taskbroker taskbroker;
    final TaskHandler handler;
    List<String> queues = List.of();
    final Map<String, Registration> registrations = new java.util.LinkedHashMap<>();
    final Map<String, Integer> queueConcurrency = new java.util.HashMap<>();
    final List<Middleware> middleware = new java.util.ArrayList<>();
    Serializer serializer;
    io.opentelemetry.api.metrics.MeterProvider meterProvider;
    boolean failFast;
    String workerId = defaultWorkerId();
    final Map<String, String> labels = new java.util.TreeMap<>();
    int concurrency = DEFAULT_CONCURRENCY;
    Duration leaseDuration = DEFAULT_LEASE_DURATION;
    Duration pollWait = DEFAULT_POLL_WAIT;
    Duration heartbeatInterval;
    Executor executor;
    boolean leaseNext = true;
    Duration stopTimeout = DEFAULT_SHUTDOWN_STOP_TIMEOUT;
    Duration stopGrace = DEFAULT_STOP_GRACE;
    BiConsumer<String, Throwable> onError =
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
    Map<String, Registration> registry() {
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
