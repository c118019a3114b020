package dev.taskbroker.client;

import dev.taskbroker.v1.CheckpointRequest;
import dev.taskbroker.v1.CheckpointResponse;
import dev.taskbroker.v1.FailRequest;
import dev.taskbroker.v1.LeasedTask;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.function.Function;

/**
 * A {@link TaskContext} with no worker or broker behind it, and the worker's way of running a
 * handler on it: for tests ({@code dev.taskbroker.client.testing} builds on it) and for running
 * a handler by hand. Its {@code checkpoint} calls the given function instead of the broker; its
 * holder can {@link #abort} it as a worker does.
 */
public final class DetachedTask {
  private final TaskContext context;
  private final java.util.concurrent.atomic.AtomicInteger cancelChecks =
      new java.util.concurrent.atomic.AtomicInteger();

  private DetachedTask(
      LeasedTask task, Function<CheckpointRequest, CheckpointResponse> checkpoint, Serializer serializer) {
    this.context = new TaskContext(checkpoint, task, Duration.ofSeconds(30), serializer, cancelChecks);
  }

  /**
   * A context for {@code task}: {@code checkpoint} sends its CheckpointRequest to {@code
   * checkpoint} (which may throw the StatusRuntimeException a broker would: LEASE_LOST makes it
   * lost), {@code serializer} decodes dependency results (and, in {@link #run}, payloads and
   * results).
   */
  public static DetachedTask of(
      LeasedTask task,
      Function<CheckpointRequest, CheckpointResponse> checkpoint,
      Serializer serializer) {
    Objects.requireNonNull(task, "task");
    Objects.requireNonNull(checkpoint, "checkpoint");
    Objects.requireNonNull(serializer, "serializer");
    return new DetachedTask(task, checkpoint, serializer);
  }

  /** What the handler receives. */
  public TaskContext context() {
    return context;
  }

  /** How many times the handler asked {@code isCancelled()} or {@code throwIfCancelled()}. */
  public int cancelChecks() {
    return cancelChecks.get();
  }

  /** Cancels the context with {@code kind}, as a worker does (the first reason stays). */
  public void abort(TaskContext.AbortKind kind) {
    context.abort(Objects.requireNonNull(kind, "kind"));
  }

  /**
   * How one attempt ended, as a worker reports it: {@code error == null} is Complete with {@code
   * result} (null: empty); otherwise {@code fail} is the FailRequest the worker would send.
   */
  public record Attempt(Object value, byte[] result, Throwable error, FailRequest fail) {
    public boolean succeeded() {
      return error == null;
    }
  }

  /**
   * Runs {@code registration}'s handler inside {@code middleware} (the first outermost) on the
   * context on this thread, as a worker does: the payload decoded (a payload that does not decode
   * fails for good), the value encoded by {@code serializer}, any Throwable failing the attempt.
   * Never throws for the handler's failure.
   */
  public Attempt run(Registration registration, List<Middleware> middleware, Serializer serializer) {
    Middleware.Next next = () -> registration.invoker().invoke(context, serializer);
    for (int i = middleware.size() - 1; i >= 0; i--) {
      Middleware m = middleware.get(i);
      Middleware.Next inner = next;
      next = () -> m.handle(context, inner);
    }
    context.bind(Thread.currentThread());
    Object value = null;
    try {
      value = next.proceed();
      return new Attempt(value, WorkerFailures.encodeResult(serializer, context.queue(), value), null, null);
    } catch (Throwable t) {
      FailRequest.Builder req = WorkerFailures.failRequest(context, t).toBuilder();
      if (context.abortKind().orElse(null) == TaskContext.AbortKind.STOPPING) {
        req.setRetryAfter(ProtoTime.duration(Duration.ZERO)); // handed back: READY at once
      }
      return new Attempt(value, null, t, req.build());
    } finally {
      context.bind(null);
      Thread.interrupted(); // a lost lease or a deadline interrupts the handler's thread
    }
  }
}
