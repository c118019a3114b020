package dev.taskbroker.client;

import dev.taskbroker.v1.LimitBucket;
import java.time.Instant;

/**
 * A limit bucket's settings and use now ({@link Taskbroker#getBucket}, {@link
 * Taskbroker#listBuckets}, {@link Taskbroker#updateBucket}): one limit shared by the tasks of any
 * queues that name it. Times are Instants, null when not set.
 *
 * @param rateLimit leases a second to the bucket's tasks together; null: no limit
 * @param maxConcurrent leases the bucket's tasks hold at once; 0: no limit
 * @param tokens tokens in the rate limit's bucket now (0 without a rate limit)
 * @param leasesHeld leases the bucket's tasks hold now
 * @param cooldownUntil when a cooldown of the bucket ends; null without one
 */
public record BucketInfo(
    String name,
    RateLimit rateLimit,
    int maxConcurrent,
    double tokens,
    int leasesHeld,
    Instant updatedAt,
    Instant cooldownUntil,
    LimitBucket proto) {

  /** A token bucket: {@code perSecond} tokens a second, up to {@code burst} (0: max(1, ceil(perSecond))). */
  public record RateLimit(double perSecond, int burst) {}

  /** The BucketInfo of a LimitBucket message. */
  public static BucketInfo of(LimitBucket b) {
    dev.taskbroker.v1.BucketConfig c = b.getConfig();
    return new BucketInfo(
        b.getName(),
        c.hasRateLimit() ? new RateLimit(c.getRateLimit().getPerSecond(), c.getRateLimit().getBurst()) : null,
        c.getMaxConcurrent(),
        b.getUse().getTokens(),
        b.getUse().getLeasesHeld(),
        b.hasUpdateTime() ? ProtoTime.instant(b.getUpdateTime()) : null,
        b.hasCooldownUntil() ? ProtoTime.instant(b.getCooldownUntil()) : null,
        b);
  }
}
