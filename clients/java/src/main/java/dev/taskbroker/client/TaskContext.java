package dev.taskbroker.client;

import com.google.protobuf.ByteString;
import dev.taskbroker.v1.BrokerServiceGrpc;
import dev.taskbroker.v1.CheckpointRequest;
import dev.taskbroker.v1.CheckpointResponse;
import dev.taskbroker.v1.LeasedTask;
import io.grpc.StatusRuntimeException;
import java.time.Instant;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

/**
 * What a handler sees of one leased task, plus the lease bookkeeping the worker's heartbeat
 * updates. Safe to use from the handler thread while the heartbeat thread updates it.
 */
public final class TaskContext {
  /** Why a task's work should stop. */
  public enum AbortKind {
    /** The lease is no longer held (expired, reclaimed); nothing will be reported. */
    LOST,
    /** An operator cancelled the task: stop and throw, the worker reports Fail. */
    CANCELLED,
    /** The worker is stopping hard after its drain timeout. */
    STOPPING,
    /** The task's deadline has passed: the broker will not accept the work any more. */
    DEADLINE
  }

  /** Counts isCancelled and throwIfCancelled calls on a detached context; null on a worker's. */
  final java.util.concurrent.atomic.AtomicInteger cancelChecks;
  /** Sends a Checkpoint: the broker's, or a test's stand-in ({@link DetachedTask}). */
  private final java.util.function.Function<CheckpointRequest, CheckpointResponse> checkpointCall;
  private final LeasedTask task;
  private final AtomicReference<AbortKind> abort = new AtomicReference<>();
  private volatile ByteString lastCheckpoint;
  private volatile Instant leaseExpiresAt;
  private final java.time.Duration extendBy;
  private final Serializer serializer;
  /** The handler has returned; guarded by this. */
  private boolean returned;
  /** Handed back at stop while the handler still ran: its result is discarded; guarded by this. */
  private boolean handedBack;
  /** The loss was logged. */
  private final java.util.concurrent.atomic.AtomicBoolean lostLogged =
      new java.util.concurrent.atomic.AtomicBoolean();

  /** The thread running the handler, interrupted on a lost lease, a deadline or a hard stop; guarded by this. */
  private Thread thread;
  /** System.nanoTime() when the handler started; guarded by this. */
  private long startedNanos;
  /** The handler's OpenTelemetry context: its process span's, a child of the producer's traceparent. */
  private volatile io.opentelemetry.context.Context traceContext;

  TaskContext(
      BrokerServiceGrpc.BrokerServiceBlockingStub broker,
      LeasedTask task,
      java.time.Duration extendBy) {
    this(broker, task, extendBy, new JsonSerializer());
  }

  TaskContext(
      BrokerServiceGrpc.BrokerServiceBlockingStub broker,
      LeasedTask task,
      java.time.Duration extendBy,
      Serializer serializer) {
    this(req -> broker.withDeadlineAfter(10, TimeUnit.SECONDS).checkpoint(req), task, extendBy, serializer, null);
  }

  TaskContext(
      java.util.function.Function<CheckpointRequest, CheckpointResponse> checkpointCall,
      LeasedTask task,
      java.time.Duration extendBy,
      Serializer serializer,
      java.util.concurrent.atomic.AtomicInteger cancelChecks) {
    this.serializer = serializer;
    this.checkpointCall = checkpointCall;
    this.cancelChecks = cancelChecks;
    this.task = task;
    this.extendBy = extendBy;
    this.traceContext = Tracing.extract(task.getMetadataMap());
    this.lastCheckpoint = task.getHasCheckpoint() ? task.getCheckpoint() : null;
    this.leaseExpiresAt =
        task.hasLeaseExpiresAt()
            ? ProtoTime.instant(task.getLeaseExpiresAt())
            : Instant.now().plus(extendBy);
  }

  /** The task as leased. */
  public LeasedTask task() {
    return task;
  }

  public String taskId() {
    return task.getTaskId();
  }

  /** The queue the task was submitted to. */
  public String queue() {
    return task.getQueue();
  }

  public ByteString payload() {
    return task.getPayload();
  }

  /** 1-based number of this attempt. */
  public int attempt() {
    return task.getAttempt();
  }

  /** Pass to downstream stores so they can reject writes from a stale holder. */
  public long fencingToken() {
    return task.getFencingToken();
  }

  /**
   * The result of each SUCCEEDED dependency of this task ({@code depends_on}, {@code
   * depends_on_index}, {@code depends_on_keys}), by task id.
   */
  public java.util.Map<String, ByteString> dependencyResults() {
    return task.getDependencyResultsMap();
  }

  /**
   * One dependency's result decoded into {@code type} by the worker's serializer (JSON by
   * default; {@code byte[]}: the bytes as they are).
   *
   * @throws SerializationException when {@code taskId} has no result here or it does not decode
   */
  public <R> R dependencyResult(String taskId, Class<R> type) {
    ByteString data = task.getDependencyResultsMap().get(taskId);
    if (data == null) {
      throw new SerializationException(
          "task " + taskId() + " has no result of a dependency " + taskId);
    }
    byte[] bytes = data.toByteArray();
    if (type == byte[].class) {
      return type.cast(bytes);
    }
    try {
      return serializer.decode(bytes, type);
    } catch (RuntimeException e) {
      throw new SerializationException(
          "the result of dependency " + taskId + " is not a valid " + type.getSimpleName() + ": "
              + e.getMessage(),
          e);
    }
  }

  /** The latest checkpoint: saved by this attempt, else by an earlier one. */
  public Optional<ByteString> lastCheckpoint() {
    return Optional.ofNullable(lastCheckpoint);
  }

  /** When the lease runs out unless extended, as last reported by the broker. */
  public Instant leaseExpiresAt() {
    return leaseExpiresAt;
  }

  /**
   * The OpenTelemetry context the handler runs in (also {@code Context.current()} on the handler
   * thread): that of its {@code process} span, a child of the producer's span context from the
   * task's {@code traceparent} (before the run, that span context).
   */
  public io.opentelemetry.context.Context traceContext() {
    return traceContext;
  }

  /** The worker runs the handler in its process span's context. */
  void traceContext(io.opentelemetry.context.Context cx) {
    traceContext = cx;
  }

  /** True once the lease is lost, the task is cancelled, its deadline passed or the worker stops hard. */
  public boolean isCancelled() {
    if (cancelChecks != null) {
      cancelChecks.incrementAndGet();
    }
    return abort.get() != null;
  }

  /** Why the work should stop, if it should. */
  public Optional<AbortKind> abortKind() {
    return Optional.ofNullable(abort.get());
  }

  /** Throws {@link CancelledException} when the work should stop. */
  public void throwIfCancelled() throws CancelledException {
    if (cancelChecks != null) {
      cancelChecks.incrementAndGet();
    }
    AbortKind kind = abort.get();
    if (kind != null) {
      throw new CancelledException(taskId(), kind);
    }
  }

  /**
   * Stores durable progress that the next attempt receives as {@link #lastCheckpoint()}, and
   * extends the lease by the worker's lease duration (docs/client-spec.md, point 3).
   *
   * @throws CancelledException when the lease is lost
   */
  public void checkpoint(ByteString data) throws CancelledException {
    if (abort.get() == AbortKind.LOST) {
      throw new CancelledException(taskId(), AbortKind.LOST);
    }
    try {
      CheckpointResponse res =
          checkpointCall.apply(
              CheckpointRequest.newBuilder()
                  .setTaskId(taskId())
                  .setLeaseToken(task.getLeaseToken())
                  .setCheckpoint(data)
                  .setExtendBy(ProtoTime.duration(extendBy))
                  .build());
      lastCheckpoint = data;
      if (res.hasLeaseExpiresAt()) {
        extendedTo(ProtoTime.instant(res.getLeaseExpiresAt()));
      }
      if (res.getCancelRequested()) {
        abort(AbortKind.CANCELLED);
      }
    } catch (StatusRuntimeException e) {
      if (ErrorDetails.isLeaseLost(e)) {
        abort(AbortKind.LOST);
        throw new CancelledException(taskId(), AbortKind.LOST);
      }
      throw e;
    }
  }

  /** Same as {@link #checkpoint(ByteString)} with raw bytes. */
  public void checkpoint(byte[] data) throws CancelledException {
    checkpoint(ByteString.copyFrom(data));
  }

  void extendedTo(Instant expiresAt) {
    leaseExpiresAt = expiresAt;
  }

  /**
   * Records the first reason only. A lost lease, a deadline or a hard stop also interrupts the
   * handler's thread, Java's way to cancel blocking work (an operator's cancel is only flagged).
   */
  void abort(AbortKind kind) {
    if (abort.compareAndSet(null, kind) && kind != AbortKind.CANCELLED) {
      synchronized (this) {
        if (thread != null) {
          thread.interrupt();
        }
      }
    }
  }

  /** Flags the lease lost; true the first time (the caller logs it), false once handed back. */
  boolean markLost() {
    abort(AbortKind.LOST);
    synchronized (this) {
      if (handedBack) {
        return false;
      }
    }
    return lostLogged.compareAndSet(false, true);
  }

  synchronized boolean handlerReturned() {
    return returned;
  }

  synchronized boolean handedBack() {
    return handedBack;
  }

  /** Records that the handler returned; false when the task was handed back before that. */
  synchronized boolean handlerReturnedNow() {
    returned = true;
    return !handedBack;
  }

  /** Marks a task whose handler still runs as handed back; false when it returned or was lost. */
  synchronized boolean takeForHandBack() {
    if (returned || abort.get() == AbortKind.LOST) {
      return false;
    }
    handedBack = true;
    return true;
  }

  /** The handler runs on {@code t} from now on (null: it has returned). */
  synchronized void bind(Thread t) {
    thread = t;
    if (t != null) {
      startedNanos = System.nanoTime();
    }
  }

  /** How long the handler has run (or ran), from when it was bound to its thread. */
  synchronized java.time.Duration ranFor() {
    return startedNanos == 0 ? java.time.Duration.ZERO : java.time.Duration.ofNanos(System.nanoTime() - startedNanos);
  }

  /** Thrown to stop a task's work once its context is cancelled. */
  public static final class CancelledException extends TaskbrokerException {
    private static final long serialVersionUID = 1L;
    private final AbortKind kind;

    CancelledException(String taskId, AbortKind kind) {
      super("task " + taskId + ": " + kind.name().toLowerCase(java.util.Locale.ROOT));
      this.kind = kind;
    }

    public AbortKind kind() {
      return kind;
    }
  }
}
