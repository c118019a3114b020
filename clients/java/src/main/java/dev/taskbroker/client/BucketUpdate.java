package dev.taskbroker.client;

import dev.taskbroker.v1.BucketConfig;
import dev.taskbroker.v1.RateLimit;
import dev.taskbroker.v1.UpdateBucketRequest;
import java.util.LinkedHashSet;
import java.util.Set;

/**
 * The changes {@link Taskbroker#updateBucket} makes to a bucket, defining it if need be: only the
 * fields set here are sent in the update mask.
 *
 * <pre>{@code
 * tb.updateBucket(BucketUpdate.of("partner-api").rateLimit(20, 20).maxConcurrent(50));
 * }</pre>
 */
public final class BucketUpdate {
  private final String name;
  private final BucketConfig.Builder config = BucketConfig.newBuilder();
  private final Set<String> paths = new LinkedHashSet<>();

  private BucketUpdate(String name) {
    this.name = name;
  }

  /** No change yet to bucket {@code name} ({@code [A-Za-z0-9._:-]{1,128}}). */
  public static BucketUpdate of(String name) {
    return new BucketUpdate(name);
  }

  /** Leases a second to the bucket's tasks together, up to {@code burst} at once (0: one second's worth). */
  public BucketUpdate rateLimit(double perSecond, int burst) {
    config.setRateLimit(RateLimit.newBuilder().setPerSecond(perSecond).setBurst(burst));
    paths.add("rate_limit");
    return this;
  }

  /** Removes the rate limit. */
  public BucketUpdate noRateLimit() {
    config.clearRateLimit();
    paths.add("rate_limit");
    return this;
  }

  /** Leases the bucket's tasks hold at once; 0 removes the limit. */
  public BucketUpdate maxConcurrent(int n) {
    config.setMaxConcurrent(n);
    paths.add("max_concurrent");
    return this;
  }

  /** The UpdateBucketRequest; IllegalStateException when nothing is set. */
  UpdateBucketRequest request() {
    if (paths.isEmpty()) {
      throw new IllegalStateException("BucketUpdate of " + name + ": nothing to change (set rateLimit or maxConcurrent)");
    }
    return UpdateBucketRequest.newBuilder()
        .setName(name)
        .setConfig(config)
        .setUpdateMask(com.google.protobuf.FieldMask.newBuilder().addAllPaths(paths))
        .build();
  }
}
