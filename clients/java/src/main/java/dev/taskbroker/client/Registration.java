package dev.taskbroker.client;

import java.lang.reflect.Type;
import java.util.Objects;

/**
 * One queue and the handler for its tasks, with the type its payload decodes to (none for a raw
 * {@link TaskHandler}). A worker is built from any number of these, one per queue ({@link
 * Worker.Builder#register}); frameworks that discover handlers (annotated beans) build them with
 * {@link #ofType(String, Type, TypedHandler)}.
 */
public final class Registration {
  private final String queue;
  private final Type payloadType;
  private final Invoker invoker;

  /** Decodes a task's payload (if typed) and runs the handler; returns its value. */
  @FunctionalInterface
  interface Invoker {
    Object invoke(TaskContext task, Serializer serializer) throws Exception;
  }

  private Registration(String queue, Type payloadType, Invoker invoker) {
    this.queue = Objects.requireNonNull(queue, "queue");
    if (queue.isEmpty()) {
      throw new IllegalArgumentException("a queue name must not be empty");
    }
    this.payloadType = payloadType;
    this.invoker = invoker;
  }

  /** Tasks of {@code queue} get their payload decoded into a {@code T}. */
  public static <T> Registration of(String queue, Class<T> type, TypedHandler<? super T, ?> handler) {
    Objects.requireNonNull(type, "type");
    Objects.requireNonNull(handler, "handler");
    return new Registration(
        queue, type, (task, s) -> handler.handle(task, type.cast(decode(queue, type, task, s))));
  }

  /**
   * Tasks of {@code queue} get their payload decoded into {@code type}, which may be generic
   * ({@code List<Email>}, as reflection gives it); the handler receives that value.
   */
  public static Registration ofType(String queue, Type type, TypedHandler<Object, ?> handler) {
    Objects.requireNonNull(type, "type");
    Objects.requireNonNull(handler, "handler");
    return new Registration(
        queue, type, (task, s) -> handler.handle(task, decode(queue, type, task, s)));
  }

  /** Tasks of {@code queue} go to a handler of raw bytes, returning raw bytes. */
  public static Registration raw(String queue, TaskHandler handler) {
    Objects.requireNonNull(handler, "handler");
    return new Registration(queue, null, (task, s) -> handler.handle(task));
  }

  public String queue() {
    return queue;
  }

  /** The type payloads decode to; null for a raw handler. */
  public Type payloadType() {
    return payloadType;
  }

  Invoker invoker() {
    return invoker;
  }

  /**
   * A payload that does not decode can never succeed on a retry: a {@link PermanentException}
   * naming the queue and the type.
   */
  private static Object decode(String queue, Type type, TaskContext task, Serializer s) {
    if (type == byte[].class) {
      return task.payload().toByteArray(); // bytes are never encoded
    }
    try {
      return s.decode(task.payload().toByteArray(), type);
    } catch (RuntimeException e) {
      throw new PermanentException(
          "queue " + queue + ": payload is not a valid " + simpleName(type) + ": "
              + String.valueOf(e.getMessage()).replaceAll("\\s+", " "),
          e);
    }
  }

  static String simpleName(Type type) {
    return type instanceof Class<?> c ? c.getSimpleName() : type.getTypeName();
  }
}
