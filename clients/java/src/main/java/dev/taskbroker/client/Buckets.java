package dev.taskbroker.client;

import dev.taskbroker.v1.AdminServiceGrpc.AdminServiceBlockingStub;
import dev.taskbroker.v1.DeleteBucketRequest;
import dev.taskbroker.v1.GetBucketRequest;
import dev.taskbroker.v1.LiftCooldownRequest;
import dev.taskbroker.v1.LimitBucket;
import dev.taskbroker.v1.ListBucketsRequest;
import dev.taskbroker.v1.ListCooldownsRequest;
import java.util.List;

/**
 * The limit-bucket and cooldown calls behind {@link Taskbroker}'s methods: requests built from
 * plain arguments, answers turned into {@link BucketInfo} and {@link CooldownInfo}. Failures stay
 * the stub's StatusRuntimeException (NOT_FOUND for a bucket that is not defined).
 */
final class Buckets {
  private Buckets() {}

  private static BucketInfo one(LimitBucket b, boolean present, String what) {
    if (!present) {
      throw new TaskbrokerException(what + ": the broker answered without a bucket");
    }
    return BucketInfo.of(b);
  }

  static BucketInfo get(AdminServiceBlockingStub admin, String name) {
    var r = admin.getBucket(GetBucketRequest.newBuilder().setName(name).build());
    return one(r.getBucket(), r.hasBucket(), "getBucket");
  }

  static List<BucketInfo> list(AdminServiceBlockingStub admin) {
    return admin.listBuckets(ListBucketsRequest.getDefaultInstance()).getBucketsList().stream()
        .map(BucketInfo::of)
        .toList();
  }

  static BucketInfo update(AdminServiceBlockingStub admin, BucketUpdate update) {
    var r = admin.updateBucket(update.request());
    return one(r.getBucket(), r.hasBucket(), "updateBucket");
  }

  static void delete(AdminServiceBlockingStub admin, String name) {
    admin.deleteBucket(DeleteBucketRequest.newBuilder().setName(name).build());
  }

  static List<CooldownInfo> cooldowns(AdminServiceBlockingStub admin, String queue, String bucket) {
    ListCooldownsRequest req =
        ListCooldownsRequest.newBuilder()
            .setQueue(queue == null ? "" : queue)
            .setBucket(bucket == null ? "" : bucket)
            .build();
    return admin.listCooldowns(req).getCooldownsList().stream().map(CooldownInfo::of).toList();
  }

  static boolean lift(AdminServiceBlockingStub admin, LiftCooldownRequest req) {
    return admin.liftCooldown(req).getLifted();
  }
}
