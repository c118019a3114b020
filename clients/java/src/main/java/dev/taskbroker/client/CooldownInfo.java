package dev.taskbroker.client;

import dev.taskbroker.v1.CooldownHold;
import java.time.Instant;

/**
 * One live cooldown ({@link Taskbroker#listCooldowns}): a queue's concurrency key or a bucket that
 * no task of is leased before {@link #until()}, set by a worker's failed attempt ({@link
 * RetryableException#coolDownKey}, {@link RetryableException#coolDownBucket}).
 *
 * @param queue CONCURRENCY_KEY: the queue of the key; {@code ""} otherwise
 * @param bucket BUCKET: the bucket; {@code ""} otherwise
 * @param taskId the task whose failed attempt set it
 */
public record CooldownInfo(
    Scope scope, String queue, String concurrencyKey, String bucket, Instant until, String taskId, CooldownHold proto) {

  /** What a cooldown holds; {@code toString()} is its name. */
  public enum Scope {
    /** The failed task's concurrency key, in its queue. */
    CONCURRENCY_KEY,
    /** The failed task's limit bucket. */
    BUCKET;

    /** The scope of a protobuf value; {@link TaskbrokerException} for one this client does not know. */
    public static Scope of(dev.taskbroker.v1.CooldownScope s) {
      return switch (s) {
        case COOLDOWN_SCOPE_CONCURRENCY_KEY -> CONCURRENCY_KEY;
        case COOLDOWN_SCOPE_BUCKET -> BUCKET;
        default -> throw new TaskbrokerException("the broker sent an unknown cooldown scope " + s);
      };
    }

    /** The protobuf value of this scope. */
    public dev.taskbroker.v1.CooldownScope proto() {
      return dev.taskbroker.v1.CooldownScope.valueOf("COOLDOWN_SCOPE_" + name());
    }
  }

  /** The CooldownInfo of a CooldownHold message. */
  public static CooldownInfo of(CooldownHold c) {
    return new CooldownInfo(
        Scope.of(c.getScope()),
        c.getQueue(),
        c.getConcurrencyKey(),
        c.getBucket(),
        c.hasUntil() ? ProtoTime.instant(c.getUntil()) : null,
        c.getTaskId(),
        c);
  }

  /** The FailRequest.cooldown of a cooldown a handler asked for. */
  static dev.taskbroker.v1.Cooldown proto(RetryableException.Cooldown c) {
    return dev.taskbroker.v1.Cooldown.newBuilder()
        .setScope(c.scope().proto())
        .setDuration(ProtoTime.duration(c.duration()))
        .build();
  }
}
