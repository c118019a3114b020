package dev.taskbroker.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Limit buckets and cooldowns against the live broker at $TASKBROKER_ADDR (scripts/conformance.sh
 * java starts one; skipped without it): a handler's {@link RetryableException#coolDownKey} holds
 * its key until the cooldown is lifted, and a bucket's settings go round trip.
 */
class BucketsTest {
  private Taskbroker tb;
  private String suffix;

  @BeforeEach
  void setUp() {
    String addr = System.getenv("TASKBROKER_ADDR");
    Assumptions.assumeTrue(addr != null && !addr.isEmpty(), "TASKBROKER_ADDR is not set");
    tb = Taskbroker.fromEnv(addr);
    suffix = Integer.toHexString(ThreadLocalRandom.current().nextInt());
  }

  @AfterEach
  void tearDown() {
    if (tb != null) {
      tb.close();
    }
  }

  /**
   * The live cooldowns of a queue's keys or a bucket once there is one (the Fail that sets it ends
   * the first attempt), or none after 30 s.
   */
  private List<CooldownInfo> firstCooldowns(String queue, String bucket) throws InterruptedException {
    Instant giveUp = Instant.now().plusSeconds(30);
    for (; ; ) {
      List<CooldownInfo> c = tb.listCooldowns(queue, bucket);
      if (!c.isEmpty() || Instant.now().isAfter(giveUp)) {
        return c;
      }
      Thread.sleep(20);
    }
  }

  @Test
  void aHandlersKeyCooldownHoldsTheKeysOtherTaskUntilItIsLifted() throws Exception {
    String queue = "test.java.cooldown." + suffix;
    String a = tb.submit(tb.spec(queue, "a").setConcurrencyKey("acme").build()).getTaskId();
    String b = tb.submit(tb.spec(queue, "b").setConcurrencyKey("acme").build()).getTaskId();
    AtomicReference<String> first = new AtomicReference<>();
    // One task at a time: the second is leased only after the first's Fail (and its cooldown) is stored.
    try (Worker w =
        Worker.builder(tb)
            .handle(
                queue,
                String.class,
                (ctx, data) -> {
                  if (first.compareAndSet(null, ctx.taskId())) {
                    throw new RetryableException("429 Too Many Requests").coolDownKey(Duration.ofHours(1));
                  }
                  return "ran " + data;
                })
            .concurrency(1)
            .pollWait(Duration.ofSeconds(1))
            .build()) {
      w.start();
      List<CooldownInfo> cooldowns = firstCooldowns(queue, null);
      assertEquals(1, cooldowns.size(), cooldowns.toString());
      CooldownInfo c = cooldowns.get(0);
      String cooled = first.get();
      String other = cooled.equals(a) ? b : a;
      assertEquals(CooldownInfo.Scope.CONCURRENCY_KEY, c.scope());
      assertEquals(List.of(queue, "acme", "", cooled), List.of(c.queue(), c.concurrencyKey(), c.bucket(), c.taskId()));
      assertTrue(c.until().isAfter(Instant.now().plus(Duration.ofMinutes(50))), "until " + c.until());
      // The failed task's own retry waits at least as long as the cooldown.
      assertFalse(tb.getTask(cooled).runAt().isBefore(c.until().minusSeconds(1)));

      TaskExplanation held = tb.explainTask(other);
      assertEquals(TaskInfo.State.READY, held.state());
      assertEquals(
          List.of("COOLDOWN acme"), held.gates().stream().map(g -> g.kind() + " " + g.concurrencyKey()).toList());

      assertTrue(tb.liftCooldown(queue, "acme"));
      assertEquals(List.of(), tb.listCooldowns(queue, null));
      assertFalse(tb.liftCooldown(queue, "acme"), "nothing left to lift");
      tb.waitFor(other, Duration.ofSeconds(30));
      assertEquals("ran " + (other.equals(a) ? "a" : "b"), tb.result(tb.getTask(other).proto(), String.class));
    }
    tb.cancelTask(first.get());
  }

  @Test
  void aBucketGoesRoundTripAndATaskNamesItAtSubmit() {
    String name = "test.java.bucket." + suffix;
    BucketInfo made = tb.updateBucket(BucketUpdate.of(name).rateLimit(20, 20).maxConcurrent(50));
    assertEquals(name, made.name());
    assertEquals(new BucketInfo.RateLimit(20, 20), made.rateLimit());
    assertEquals(50, made.maxConcurrent());
    assertEquals(0, made.leasesHeld());
    assertNotNull(made.updatedAt());
    assertNull(made.cooldownUntil());

    BucketInfo got = tb.getBucket(name);
    assertEquals(new BucketInfo.RateLimit(20, 20), got.rateLimit());
    assertEquals(50, got.maxConcurrent());
    assertTrue(tb.listBuckets().stream().anyMatch(x -> x.name().equals(name) && x.maxConcurrent() == 50));

    // Only the fields set change.
    BucketInfo changed = tb.updateBucket(BucketUpdate.of(name).noRateLimit());
    assertNull(changed.rateLimit());
    assertEquals(50, changed.maxConcurrent());

    String queue = "test.java.bucket." + suffix;
    String id =
        tb.submit(tb.spec(queue, "x").setBucket(name).setRunAt(ProtoTime.fromNow(Duration.ofHours(1))).build())
            .getTaskId();
    assertEquals(name, tb.getTask(id).bucket());
    tb.cancelTask(id);

    tb.deleteBucket(name);
    assertFalse(tb.listBuckets().stream().anyMatch(x -> x.name().equals(name)));
    StatusRuntimeException missing = assertThrows(StatusRuntimeException.class, () -> tb.getBucket(name));
    assertEquals(Status.Code.NOT_FOUND, missing.getStatus().getCode());
    StatusRuntimeException gone = assertThrows(StatusRuntimeException.class, () -> tb.deleteBucket(name));
    assertEquals(Status.Code.NOT_FOUND, gone.getStatus().getCode());
    StatusRuntimeException bad =
        assertThrows(StatusRuntimeException.class, () -> tb.updateBucket(BucketUpdate.of("not a bucket name!").maxConcurrent(1)));
    assertEquals(Status.Code.INVALID_ARGUMENT, bad.getStatus().getCode());
    assertThrows(IllegalStateException.class, () -> tb.updateBucket(BucketUpdate.of(name)));
  }

  @Test
  void aHandlersBucketCooldownShowsOnItsBucketUntilItIsLifted() throws Exception {
    String queue = "test.java.cooldown." + suffix;
    String bucket = "test.java.bucket.c" + suffix;
    tb.updateBucket(BucketUpdate.of(bucket).maxConcurrent(10));
    String id = tb.submit(tb.spec(queue, "x").setBucket(bucket).build()).getTaskId();
    List<CooldownInfo> cooldowns;
    try (Worker w =
        Worker.builder(tb)
            .handle(
                queue,
                String.class,
                (ctx, data) -> {
                  throw new RetryableException("429 from the partner").coolDownBucket(Duration.ofHours(1));
                })
            .concurrency(1)
            .pollWait(Duration.ofSeconds(1))
            .build()) {
      w.start();
      cooldowns = firstCooldowns(null, bucket);
    }
    assertEquals(1, cooldowns.size(), cooldowns.toString());
    CooldownInfo c = cooldowns.get(0);
    assertEquals(CooldownInfo.Scope.BUCKET, c.scope());
    assertEquals(List.of(bucket, "", id), List.of(c.bucket(), c.queue(), c.taskId()));
    assertEquals(c.until(), tb.getBucket(bucket).cooldownUntil());
    assertTrue(tb.liftBucketCooldown(bucket));
    assertNull(tb.getBucket(bucket).cooldownUntil());
    tb.cancelTask(id);
    tb.deleteBucket(bucket);
  }
}
