package dev.taskbroker.client.testing;

import com.google.protobuf.Any;
import com.google.protobuf.ByteString;
import com.google.rpc.ErrorInfo;
import dev.taskbroker.client.DetachedTask;
import dev.taskbroker.client.ErrorDetails;
import dev.taskbroker.client.JsonSerializer;
import dev.taskbroker.client.Middleware;
import dev.taskbroker.client.Registration;
import dev.taskbroker.client.Serializer;
import dev.taskbroker.client.TaskContext;
import dev.taskbroker.client.TaskHandler;
import dev.taskbroker.client.TypedHandler;
import dev.taskbroker.v1.CheckpointRequest;
import dev.taskbroker.v1.CheckpointResponse;
import dev.taskbroker.v1.LeasedTask;
import io.grpc.protobuf.StatusProto;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A {@link TaskContext} no broker leased, and what the handler did with it: {@code checkpoint}
 * is recorded (and answered as {@link Builder#cancelAtCheckpoint} and {@link
 * Builder#loseLeaseAtCheckpoint} say), {@link #cancel} aborts it as a worker does, {@link #run}
 * runs a handler as a worker does and returns its {@link Outcome}. Heartbeats are the worker's,
 * not the handler's: there are none to record.
 *
 * <pre>{@code
 * TestTaskContext t = TestTaskContext.builder("imports", new Import(3)).attempt(2).checkpoint("1".getBytes()).build();
 * Outcome out = t.run(Import.class, handler);
 * assertTrue(out.succeeded());
 * assertEquals(2, t.checkpoints().size());
 * }</pre>
 */
public final class TestTaskContext {
  /** The attempts a task gets when its retry policy sets none (the broker's default). */
  public static final int DEFAULT_MAX_ATTEMPTS = 3;

  private static final AtomicLong IDS = new AtomicLong();

  private final DetachedTask detached;
  private final Serializer serializer;
  private final List<byte[]> checkpoints = Collections.synchronizedList(new ArrayList<>());
  private final int cancelAt;
  private final int loseAt;
  private volatile Outcome outcome;

  static String newId() {
    return "test-task-" + IDS.incrementAndGet();
  }

  private TestTaskContext(LeasedTask task, Serializer serializer, int cancelAt, int loseAt) {
    this.serializer = serializer;
    this.cancelAt = cancelAt;
    this.loseAt = loseAt;
    this.detached = DetachedTask.of(task, this::answer, serializer);
  }

  /** Attempt 1 of 3 of a task of {@code queue} carrying {@code payload} (see {@link #builder}). */
  public static TestTaskContext of(String queue, Object payload) {
    return builder(queue, payload).build();
  }

  /**
   * A task of {@code queue} carrying {@code payload}: bytes as they are, null as empty, anything
   * else encoded by the serializer (JSON by default).
   */
  public static Builder builder(String queue, Object payload) {
    return new Builder(queue, payload);
  }

  /** A context for a whole LeasedTask. */
  public static Builder builder(LeasedTask task) {
    return new Builder(task);
  }

  private CheckpointResponse answer(CheckpointRequest req) {
    int n;
    synchronized (checkpoints) {
      n = checkpoints.size() + 1;
      if (loseAt > 0 && n >= loseAt) {
        throw StatusProto.toStatusRuntimeException(
            com.google.rpc.Status.newBuilder()
                .setCode(io.grpc.Status.Code.ABORTED.value())
                .setMessage("lease lost")
                .addDetails(
                    Any.pack(
                        ErrorInfo.newBuilder()
                            .setDomain(ErrorDetails.DOMAIN)
                            .setReason(ErrorDetails.LEASE_LOST)
                            .build()))
                .build());
      }
      checkpoints.add(req.getCheckpoint().toByteArray());
    }
    return CheckpointResponse.newBuilder()
        .setLeaseExpiresAt(timestamp(Instant.now().plusSeconds(30)))
        .setCancelRequested(cancelAt > 0 && n >= cancelAt)
        .build();
  }

  static com.google.protobuf.Timestamp timestamp(Instant at) {
    return com.google.protobuf.Timestamp.newBuilder()
        .setSeconds(at.getEpochSecond())
        .setNanos(at.getNano())
        .build();
  }

  /** What the handler receives: the same type a worker hands it. */
  public TaskContext context() {
    return detached.context();
  }

  /** The checkpoints the handler saved, in order. */
  public List<byte[]> checkpoints() {
    synchronized (checkpoints) {
      return List.copyOf(checkpoints);
    }
  }

  /** How many times the handler asked {@code isCancelled()} or {@code throwIfCancelled()}. */
  public int cancelChecks() {
    return detached.cancelChecks();
  }

  /** Aborts the context as a worker does: CANCELLED (an operator), LOST, STOPPING, DEADLINE. */
  public void cancel(TaskContext.AbortKind kind) {
    detached.abort(kind);
  }

  /** The outcome of the last {@code run}; null before one. */
  public Outcome outcome() {
    return outcome;
  }

  /** Runs a typed handler as {@code Worker.Builder.handle(queue, type, handler)} would. */
  public <T> Outcome run(Class<T> type, TypedHandler<? super T, ?> handler, Middleware... middleware) {
    return run(Registration.of(context().queue(), type, handler), middleware);
  }

  /** Runs a raw handler as {@code Worker.Builder.handle(queue, handler)} would. */
  public Outcome run(TaskHandler handler, Middleware... middleware) {
    return run(Registration.raw(context().queue(), handler), middleware);
  }

  /** Runs a registration's handler inside {@code middleware} (the first outermost) on this thread. */
  public Outcome run(Registration registration, Middleware... middleware) {
    return run(registration, List.of(middleware));
  }

  Outcome run(Registration registration, List<Middleware> middleware) {
    DetachedTask.Attempt a = detached.run(registration, middleware, serializer);
    boolean lost = context().abortKind().orElse(null) == TaskContext.AbortKind.LOST;
    Outcome out = new Outcome(a, lost, serializer);
    outcome = out;
    return out;
  }

  /** Sets the task a TestTaskContext hands its handler. */
  public static final class Builder {
    private final LeasedTask.Builder task;
    private Object payload;
    private boolean encode;
    private Serializer serializer = new JsonSerializer();
    private int cancelAt;
    private int loseAt;

    private Builder(String queue, Object payload) {
      this.task =
          LeasedTask.newBuilder()
              .setTaskId(newId())
              .setQueue(queue)
              .setAttempt(1)
              .setMaxAttempts(DEFAULT_MAX_ATTEMPTS)
              .setLeaseToken("test-lease")
              .setFencingToken(1)
              .setLeaseExpiresAt(timestamp(Instant.now().plusSeconds(30)))
              .setCreatedAt(timestamp(Instant.now()));
      this.payload = payload;
      this.encode = true;
    }

    private Builder(LeasedTask task) {
      this.task = task.toBuilder();
    }

    public Builder taskId(String id) {
      task.setTaskId(id);
      return this;
    }

    public Builder key(String key) {
      task.setKey(key);
      return this;
    }

    /** 1-based; 1 by default. */
    public Builder attempt(int attempt) {
      task.setAttempt(attempt);
      return this;
    }

    /** 3 by default. */
    public Builder maxAttempts(int n) {
      task.setMaxAttempts(n);
      return this;
    }

    public Builder metadata(String key, String value) {
      task.putMetadata(key, value);
      return this;
    }

    /** The checkpoint an earlier attempt saved: {@code lastCheckpoint()} returns it. */
    public Builder checkpoint(byte[] checkpoint) {
      task.setCheckpoint(ByteString.copyFrom(checkpoint)).setHasCheckpoint(true);
      return this;
    }

    public Builder dependencyResult(String taskId, byte[] result) {
      task.putDependencyResults(taskId, ByteString.copyFrom(result));
      return this;
    }

    public Builder deadline(Instant deadline) {
      task.setDeadline(timestamp(deadline));
      return this;
    }

    public Builder atMostOnce() {
      task.setAtMostOnce(true).setMaxAttempts(1);
      return this;
    }

    public Builder fencingToken(long token) {
      task.setFencingToken(token);
      return this;
    }

    /** Encodes the payload and results, decodes payloads; JSON by default. */
    public Builder serializer(Serializer serializer) {
      this.serializer = serializer;
      return this;
    }

    /** The n-th checkpoint's answer (1-based) says an operator cancelled the task (CANCELLED). */
    public Builder cancelAtCheckpoint(int n) {
      this.cancelAt = n;
      return this;
    }

    /** The n-th checkpoint (1-based) finds the lease lost: it throws CancelledException (LOST). */
    public Builder loseLeaseAtCheckpoint(int n) {
      this.loseAt = n;
      return this;
    }

    public TestTaskContext build() {
      if (encode) {
        byte[] bytes =
            payload == null
                ? new byte[0]
                : payload instanceof byte[] raw ? raw : serializer.encode(payload);
        task.setPayload(ByteString.copyFrom(bytes));
      }
      return new TestTaskContext(task.build(), serializer, cancelAt, loseAt);
    }
  }
}
