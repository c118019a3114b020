package dev.taskbroker.client;

/**
 * Runs around every handler call of a worker, on every queue: it sees the task, calls {@code
 * next.proceed()} to run the rest of the chain and the handler, and sees the outcome (the value
 * returned, or the exception thrown) and can time it. It may replace the outcome: return another
 * value, or throw instead (for example a {@link PermanentException} so the task goes DEAD at
 * once). The first middleware registered is the outermost.
 *
 * <p>The value is the handler's own return value, before the worker encodes it as the result:
 * a typed handler's object, a raw {@link TaskHandler}'s bytes. A payload that does not decode is
 * an exception from {@code next.proceed()} ({@link PermanentException}).
 *
 * <pre>{@code
 * Worker.builder(tb)
 *     .middleware((task, next) -> {
 *       long t0 = System.nanoTime();
 *       try {
 *         return next.proceed();
 *       } finally {
 *         log.info(task.queue() + " " + task.taskId() + " took " + (System.nanoTime() - t0) + " ns");
 *       }
 *     })
 * }</pre>
 */
@FunctionalInterface
public interface Middleware {
  Object handle(TaskContext task, Next next) throws Exception;

  /** The rest of the chain: the next middleware, or the handler itself. */
  @FunctionalInterface
  interface Next {
    Object proceed() throws Exception;
  }
}
