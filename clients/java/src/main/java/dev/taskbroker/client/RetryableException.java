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
  private transient Cooldown cooldown;

  /**
   * What a failed attempt asks the broker to hold (FailRequest.cooldown): the task's own
   * concurrency key (in its queue) or its limit bucket, for {@code duration}, on every replica.
   */
  public record Cooldown(CooldownInfo.Scope scope, Duration duration) {}

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

  /**
   * Holds every task of this task's concurrency key (in its queue) for {@code duration}, on every
   * replica, e.g. from a 429's Retry-After; this task's retry waits at least as long. {@code throw
   * new RetryableException("429").coolDownKey(Duration.ofSeconds(90))}. The broker refuses it
   * (INVALID_ARGUMENT, the Fail not applied) when the task has no key or {@code duration} is
   * above its max_cooldown (1 hour by default). Replaces a cooldown asked for before.
   */
  public RetryableException coolDownKey(Duration duration) {
    return coolDown(CooldownInfo.Scope.CONCURRENCY_KEY, duration);
  }

  /** As {@link #coolDownKey}, for the task's limit bucket. */
  public RetryableException coolDownBucket(Duration duration) {
    return coolDown(CooldownInfo.Scope.BUCKET, duration);
  }

  private RetryableException coolDown(CooldownInfo.Scope scope, Duration duration) {
    if (duration == null || duration.isNegative() || duration.isZero()) {
      throw new IllegalArgumentException("a cooldown must be above zero, got " + duration);
    }
    this.cooldown = new Cooldown(scope, duration);
    return this;
  }

  /** The cooldown asked for by {@link #coolDownKey} or {@link #coolDownBucket}, if any. */
  public Optional<Cooldown> cooldown() {
    return Optional.ofNullable(cooldown);
  }
}
