package dev.taskbroker.client;

import java.time.Duration;
import java.util.Optional;

/**
 * The attempt failed but may succeed later: the worker reports Fail and the broker applies the
 * task's retry policy. Any other exception a handler throws is treated the same way.
 */
public class RetryableException extends TaskbrokerException {
  private static final long serialVersionUID = 1L;
  private final transient Duration retryAfter;

  public RetryableException(String message) {
    this(message, null, null);
  }

  /** {@code retryAfter} overrides the retry policy's backoff for this retry; null keeps it. */
  public RetryableException(String message, Duration retryAfter, Throwable cause) {
    super(message, cause);
    this.retryAfter = retryAfter;
  }

  public Optional<Duration> retryAfter() {
    return Optional.ofNullable(retryAfter);
  }
}
