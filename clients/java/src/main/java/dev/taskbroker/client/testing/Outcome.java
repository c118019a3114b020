package dev.taskbroker.client.testing;

import dev.taskbroker.client.CooldownInfo;
import dev.taskbroker.client.DetachedTask;
import dev.taskbroker.client.RetryableException;
import dev.taskbroker.client.Serializer;
import dev.taskbroker.v1.FailRequest;
import java.time.Duration;
import java.util.Optional;

/** How one attempt ended, as a worker reports it: Complete with a result, or Fail. */
public final class Outcome {
  private final DetachedTask.Attempt attempt;
  private final boolean leaseLost;
  private final Serializer serializer;

  Outcome(DetachedTask.Attempt attempt, boolean leaseLost, Serializer serializer) {
    this.attempt = attempt;
    this.leaseLost = leaseLost;
    this.serializer = serializer;
  }

  /** The handler returned: the worker sends Complete. */
  public boolean succeeded() {
    return attempt.error() == null;
  }

  /** The result bytes stored (empty for none); null when the attempt failed. */
  public byte[] result() {
    return succeeded() ? (attempt.result() == null ? new byte[0] : attempt.result()) : null;
  }

  /** The result decoded into {@code type} by the serializer ({@code byte[]}: as it is). */
  public <R> R result(Class<R> type) {
    byte[] bytes = result();
    if (bytes == null) {
      throw new IllegalStateException("the attempt failed: " + errorMessage());
    }
    return type == byte[].class ? type.cast(bytes) : serializer.decode(bytes, type);
  }

  /** What the handler returned, before encoding. */
  public Object value() {
    return attempt.value();
  }

  /** What the handler threw (or the error of a result that cannot be encoded); null on success. */
  public Throwable error() {
    return attempt.error();
  }

  /** The Fail's error message: the task's last_error; empty on success. */
  public String errorMessage() {
    return succeeded() ? "" : attempt.fail().getErrorMessage();
  }

  /** The attempt failed and is retried (false for a PermanentException, and on success). */
  public boolean retryable() {
    return !succeeded() && !attempt.fail().getNonRetryable();
  }

  /** The attempt failed for good: the task goes DEAD without a retry. */
  public boolean permanent() {
    return !succeeded() && attempt.fail().getNonRetryable();
  }

  /** The backoff the failure asked for ({@code RetryableException}'s retryAfter; zero after a hard stop). */
  public Optional<Duration> retryAfter() {
    if (succeeded() || !attempt.fail().hasRetryAfter()) {
      return Optional.empty();
    }
    com.google.protobuf.Duration d = attempt.fail().getRetryAfter();
    return Optional.of(Duration.ofSeconds(d.getSeconds(), d.getNanos()));
  }

  public boolean preferSameWorker() {
    return !succeeded() && attempt.fail().getPreferSameWorker();
  }

  /**
   * The cooldown the failure asked for ({@code RetryableException}'s coolDownKey or
   * coolDownBucket): FailRequest.cooldown.
   */
  public Optional<RetryableException.Cooldown> cooldown() {
    if (succeeded() || !attempt.fail().hasCooldown()) {
      return Optional.empty();
    }
    dev.taskbroker.v1.Cooldown c = attempt.fail().getCooldown();
    com.google.protobuf.Duration d = c.getDuration();
    return Optional.of(
        new RetryableException.Cooldown(CooldownInfo.Scope.of(c.getScope()), Duration.ofSeconds(d.getSeconds(), d.getNanos())));
  }

  /** The lease was lost during the attempt: a worker reports nothing then. */
  public boolean leaseLost() {
    return leaseLost;
  }

  /** The FailRequest a worker would send; null on success. */
  public FailRequest failRequest() {
    return attempt.fail();
  }

  @Override
  public String toString() {
    return succeeded()
        ? "Outcome[succeeded, " + result().length + " bytes]"
        : "Outcome[failed" + (permanent() ? " permanently" : "") + ": " + errorMessage() + "]";
  }
}
