package dev.taskbroker.client;

import com.google.protobuf.Duration;
import com.google.protobuf.Timestamp;
import java.time.Clock;
import java.time.Instant;

/**
 * Conversions between java.time and the protobuf well-known time types: a TaskSpec's run_at and
 * deadline ({@link #timestamp}, {@link #fromNow}) and a RetryPolicy's backoffs ({@link #duration}).
 *
 * <pre>{@code
 * tb.submit(tb.spec("emails", email).setRunAt(ProtoTime.fromNow(Duration.ofMinutes(5))).build());
 * tb.submit(tb.spec("emails", email).setRunAt(ProtoTime.timestamp(Instant.parse("2030-01-01T09:00:00Z"))).build());
 * }</pre>
 */
public final class ProtoTime {
  private ProtoTime() {}

  /**
   * The Timestamp {@code delay} from now on the system clock: a run_at that keeps a task SCHEDULED
   * for {@code delay} (the broker compares it with its own clock).
   */
  public static Timestamp fromNow(java.time.Duration delay) {
    return fromNow(delay, Clock.systemUTC());
  }

  /** The Timestamp {@code delay} after {@code clock}'s instant now. */
  public static Timestamp fromNow(java.time.Duration delay, Clock clock) {
    return timestamp(clock.instant().plus(java.util.Objects.requireNonNull(delay, "delay")));
  }

  public static Duration duration(java.time.Duration d) {
    return Duration.newBuilder().setSeconds(d.getSeconds()).setNanos(d.getNano()).build();
  }

  public static Timestamp timestamp(Instant t) {
    return Timestamp.newBuilder().setSeconds(t.getEpochSecond()).setNanos(t.getNano()).build();
  }

  public static Instant instant(Timestamp t) {
    return Instant.ofEpochSecond(t.getSeconds(), t.getNanos());
  }
}
