package dev.taskbroker.client;

import dev.taskbroker.v1.FailRequest;

/**
 * How the worker words and reports a failed attempt: the log line, the result bytes of a
 * handler's value, and the Fail request ({@link DetachedTask} uses these too).
 */
final class WorkerFailures {
  private static final System.Logger LOG = System.getLogger(Worker.class.getName());

  private WorkerFailures() {}

  /**
   * Logs a failed attempt (docs/client-spec.md, point 11, Logging): a {@link RetryableException}
   * or {@link PermanentException} the handler threw (a payload that does not decode is one) at
   * WARNING in one line without a stack, saying whether the task will be retried or goes DEAD (a
   * PermanentException, or the last of max_attempts); anything else it threw, unexpected, at
   * ERROR with its stack; a value it returned that cannot be encoded ({@code returned}) at ERROR,
   * one line naming the type.
   */
  static void logFailure(TaskContext ctx, Throwable error, boolean returned) {
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

  /**
   * The result bytes of a handler's value: none for null, bytes as they are, anything else through
   * the serializer. A value it cannot encode fails the attempt (retryable: a fixed deploy may
   * succeed), with a message naming the type.
   */
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
}
