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
  private final boolean preferSameWorker;

  public RetryableException(String message) {
    this(message, null, null);
  }

  /** {@code retryAfter} overrides the retry policy's backoff for this retry; null keeps it. */
  public RetryableException(String message, Duration retryAfter, Throwable cause) {
    this(message, retryAfter, cause, false);
  }

  /**
   * With {@code preferSameWorker}, asks the broker to keep the retry for this worker (its local
   * files are here): FailRequest.prefer_same_worker, SOFT unless the task's sticky policy is HARD.
   */
  public RetryableException(
      String message, Duration retryAfter, Throwable cause, boolean preferSameWorker) {
    super(message, cause);
    this.retryAfter = retryAfter;
    this.preferSameWorker = preferSameWorker;
  }

  /** A retryable failure whose retry is reserved for this worker (routing). */
  public static RetryableException onSameWorker(String message, Throwable cause) {
    return new RetryableException(message, null, cause, true);
  }

  public Optional<Duration> retryAfter() {
    return Optional.ofNullable(retryAfter);
  }

  /** Whether the retry should stay on this worker. */
  public boolean preferSameWorker() {
    return preferSameWorker;
  }
}
