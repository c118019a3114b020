package dev.taskbroker.client;

import java.time.Duration;
import java.util.concurrent.ThreadLocalRandom;

/**
 * The pause after failed calls in a row (docs/client-spec.md, point 1): full jitter, a random
 * {@code [0.1, 1] x min(10 s, 200 ms x 2^failures)}, so reconnecting workers spread out.
 */
public final class Backoff {
  public static final Duration BASE = Duration.ofMillis(200);
  public static final Duration MAX = Duration.ofSeconds(10);

  private Backoff() {}

  /** The ceiling for {@code failures} failures in a row (0 = the first). */
  public static Duration ceiling(int failures) {
    long ms = BASE.toMillis() << Math.min(Math.max(failures, 0), 16);
    return Duration.ofMillis(Math.min(ms, MAX.toMillis()));
  }

  /** A random pause up to {@link #ceiling(int)}, at least a tenth of it. */
  public static Duration delay(int failures) {
    double f = Math.max(ThreadLocalRandom.current().nextDouble(), 0.1);
    return Duration.ofMillis((long) (ceiling(failures).toMillis() * f));
  }
}
