package dev.taskbroker.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.taskbroker.v1.FailRequest;
import dev.taskbroker.v1.StickyStrategy;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Routing: worker labels on every Lease, prefer_same_worker on Fail, the builders. */
class RoutingTest {
  private FakeBroker fake;

  @BeforeEach
  void setUp() throws Exception {
    fake = new FakeBroker();
  }

  @AfterEach
  void tearDown() {
    fake.close();
  }

  private static void until(java.util.function.BooleanSupplier cond) throws InterruptedException {
    long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
    while (!cond.getAsBoolean()) {
      if (System.nanoTime() > end) {
        throw new AssertionError("condition not met in time");
      }
      Thread.sleep(10);
    }
  }

  @Test
  void sendsLabelsOnEveryLeaseAndPreferSameWorkerOnFail() throws Exception {
    fake.add("a");
    fake.add("b");
    Worker w =
        Worker.builder(
                fake.taskbroker(),
                ctx -> {
                  if (ctx.payload().toStringUtf8().equals("a")) {
                    throw RetryableException.onSameWorker("local files are here", null);
                  }
                  throw new IllegalStateException("plain");
                })
            .queues("q")
            .workerId("w1")
            .pollWait(Duration.ofSeconds(1))
            .label("gpu", "a100")
            .labels(Map.of("region", "eu"))
            .onError((during, e) -> {})
            .build();
    w.start();
    until(() -> fake.fails.size() == 2);
    w.stop(Duration.ofSeconds(1));
    assertEquals(Map.of("gpu", "a100", "region", "eu"), w.labels());
    assertFalse(fake.leases.isEmpty());
    fake.leases.forEach(l -> assertEquals(Map.of("gpu", "a100", "region", "eu"), l.getLabelsMap()));
    Map<String, FailRequest> byId =
        fake.fails.stream().collect(Collectors.toMap(FailRequest::getTaskId, Function.identity()));
    assertTrue(byId.get("t1").getPreferSameWorker());
    assertFalse(byId.get("t2").getPreferSameWorker());
  }

  @Test
  void refusesTheThirtyThirdLabel() {
    Worker.Builder b = Worker.builder(fake.taskbroker(), ctx -> null).queues("q");
    for (int i = 0; i < Routing.MAX_LABELS; i++) {
      b.label("k" + i, "v");
    }
    assertThrows(IllegalArgumentException.class, () -> b.label("one-more", "v"));
  }

  @Test
  void buildersFillTheMessages() {
    assertEquals("w-1", Routing.targetWorker("w-1").getWorkerId());
    assertEquals(Map.of("gpu", "a100"), Routing.targetLabels(Map.of("gpu", "a100")).getLabelsMap());
    var soft = Routing.softSticky(Duration.ofSeconds(60));
    assertEquals(StickyStrategy.STICKY_STRATEGY_SOFT, soft.getStrategy());
    assertEquals(60, soft.getTimeout().getSeconds());
    assertFalse(Routing.softSticky(null).hasTimeout());
    assertEquals(StickyStrategy.STICKY_STRATEGY_HARD, Routing.hardSticky().getStrategy());
    var f = Routing.fanout(6, true);
    assertEquals(6, f.getCopies());
    assertTrue(f.getDistinctWorkers());
    assertThrows(IllegalArgumentException.class, () -> Routing.fanout(0, false));
    assertThrows(IllegalArgumentException.class, () -> Routing.targetLabels(Map.of()));
  }
}
