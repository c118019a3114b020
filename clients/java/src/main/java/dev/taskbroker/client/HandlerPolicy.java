package dev.taskbroker.client;

import dev.taskbroker.v1.RetryPolicy;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * A queue's policy, declared with its handler ({@link Worker.Builder#policy}; docs/client-spec.md
 * point 20). Each field is unset unless given.
 *
 * <pre>{@code
 * Worker.builder(tb)
 *     .handle("emails", Email.class, mailer::send)
 *     .policy("emails", HandlerPolicy.builder().maxAttempts(5).backoff(Duration.ofSeconds(10))
 *         .nonRetryable(InvalidAddressException.class).build())
 * }</pre>
 *
 * <p>The retry fields fill, field by field, what a task's own retry leaves unset when it is
 * submitted through the same {@link Taskbroker}: the spec's own retry wins, then these, then the
 * broker's {@code [queues.NAME] retry}, then its {@code [retry]}. An exception of a {@code
 * nonRetryable} type (or with one among its causes) fails the attempt for good.
 */
public final class HandlerPolicy {
  private final RetryPolicy retry;
  private final List<Class<? extends Throwable>> nonRetryable;
  private final int concurrency;

  private HandlerPolicy(RetryPolicy retry, List<Class<? extends Throwable>> nonRetryable, int concurrency) {
    this.retry = retry;
    this.nonRetryable = List.copyOf(nonRetryable);
    this.concurrency = concurrency;
  }

  /** The queue's own limit of tasks running at once in the worker; 0: unset. */
  public int concurrency() {
    return concurrency;
  }

  public static Builder builder() {
    return new Builder();
  }

  /** The retry defaults (fields at their default value are unset). */
  public RetryPolicy retry() {
    return retry;
  }

  public List<Class<? extends Throwable>> nonRetryable() {
    return nonRetryable;
  }

  /** Whether {@code error} or one of its causes is of a non-retryable type. */
  public boolean isNonRetryable(Throwable error) {
    for (Throwable e = error; e != null; e = e.getCause() == e ? null : e.getCause()) {
      for (Class<? extends Throwable> t : nonRetryable) {
        if (t.isInstance(e)) {
          return true;
        }
      }
    }
    return false;
  }

  /** {@code own}'s fields, and {@code defaults}' where {@code own} leaves one unset. */
  public static RetryPolicy merge(RetryPolicy own, RetryPolicy defaults) {
    RetryPolicy.Builder r = own.toBuilder();
    if (own.getMaxAttempts() == 0) {
      r.setMaxAttempts(defaults.getMaxAttempts());
    }
    if (own.getBackoffMultiplier() == 0) {
      r.setBackoffMultiplier(defaults.getBackoffMultiplier());
    }
    if (!own.hasInitialBackoff() && defaults.hasInitialBackoff()) {
      r.setInitialBackoff(defaults.getInitialBackoff());
    }
    if (!own.hasMaxBackoff() && defaults.hasMaxBackoff()) {
      r.setMaxBackoff(defaults.getMaxBackoff());
    }
    if (!own.hasJitter() && defaults.hasJitter()) {
      r.setJitter(defaults.getJitter());
    }
    return r.build();
  }

  /** A middleware turning this policy's non-retryable exceptions on {@code queue} permanent. */
  Middleware classifier(String queue) {
    return (task, next) -> {
      try {
        return next.proceed();
      } catch (PermanentException e) {
        throw e;
      } catch (Exception e) {
        if (task.queue().equals(queue) && isNonRetryable(e)) {
          throw new PermanentException(e.getClass().getSimpleName() + ": " + e.getMessage(), e);
        }
        throw e;
      }
    };
  }

  /** Builds a {@link HandlerPolicy}. */
  public static final class Builder {
    private final RetryPolicy.Builder retry = RetryPolicy.newBuilder();
    private final List<Class<? extends Throwable>> nonRetryable = new ArrayList<>();
    private int concurrency;

    private Builder() {}

    /**
     * At most {@code n} of the queue's tasks run at once in the worker (within its {@code
     * concurrency}); the worker leases no more of them.
     */
    public Builder concurrency(int n) {
      if (n < 1) {
        throw new IllegalArgumentException("concurrency must be at least 1, got " + n);
      }
      concurrency = n;
      return this;
    }

    /** Total attempts allowed, counting the first, at least 1. */
    public Builder maxAttempts(int n) {
      if (n < 1) {
        throw new IllegalArgumentException("maxAttempts must be at least 1, got " + n);
      }
      retry.setMaxAttempts(n);
      return this;
    }

    /** Backoff before the second attempt (zero retries at once). */
    public Builder backoff(Duration d) {
      retry.setInitialBackoff(ProtoTime.duration(d));
      return this;
    }

    /** Factor applied to the backoff after each failure, at least 1. */
    public Builder backoffMultiplier(double factor) {
      if (!(factor >= 1)) {
        throw new IllegalArgumentException("backoffMultiplier must be at least 1, got " + factor);
      }
      retry.setBackoffMultiplier(factor);
      return this;
    }

    /** Upper bound of the backoff. */
    public Builder maxBackoff(Duration d) {
      retry.setMaxBackoff(ProtoTime.duration(d));
      return this;
    }

    /** Exceptions (and their subclasses) that fail the attempt without retry. */
    @SafeVarargs
    public final Builder nonRetryable(Class<? extends Throwable>... types) {
      nonRetryable.addAll(List.of(types));
      return this;
    }

    public HandlerPolicy build() {
      return new HandlerPolicy(retry.build(), nonRetryable, concurrency);
    }
  }
}
