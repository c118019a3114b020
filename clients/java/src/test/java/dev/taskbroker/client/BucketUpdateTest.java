package dev.taskbroker.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.taskbroker.v1.UpdateBucketRequest;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;

/** What BucketUpdate sends, and the cooldowns RetryableException refuses: no broker. */
class BucketUpdateTest {
  @Test
  void theMaskNamesEachFieldSetOnceInTheOrderSet() {
    UpdateBucketRequest req = BucketUpdate.of("b").maxConcurrent(3).maxConcurrent(4).rateLimit(20, 20).request();
    assertEquals("b", req.getName());
    assertEquals(4, req.getConfig().getMaxConcurrent());
    assertEquals(20, req.getConfig().getRateLimit().getBurst());
    assertEquals(List.of("max_concurrent", "rate_limit"), req.getUpdateMask().getPathsList());

    UpdateBucketRequest off = BucketUpdate.of("b").rateLimit(5, 0).noRateLimit().request();
    assertFalse(off.getConfig().hasRateLimit());
    assertEquals(List.of("rate_limit"), off.getUpdateMask().getPathsList());
    assertThrows(IllegalStateException.class, () -> BucketUpdate.of("b").request());
  }

  @Test
  void aCooldownMustBeAboveZero() {
    assertThrows(IllegalArgumentException.class, () -> new RetryableException("x").coolDownKey(Duration.ZERO));
    assertThrows(IllegalArgumentException.class, () -> new RetryableException("x").coolDownBucket(null));
  }
}
