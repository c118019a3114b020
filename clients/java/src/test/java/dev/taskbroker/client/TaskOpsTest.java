package dev.taskbroker.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * getTask, listTasks, cancelTask, requeueTask and explainTask against the live broker at
 * $TASKBROKER_ADDR (scripts/conformance.sh java starts one; skipped without it): states and gate
 * kinds by name, times as Instants.
 */
class TaskOpsTest {
  private Taskbroker tb;
  private String queue;

  @BeforeEach
  void setUp() {
    String addr = System.getenv("TASKBROKER_ADDR");
    Assumptions.assumeTrue(addr != null && !addr.isEmpty(), "TASKBROKER_ADDR is not set");
    tb = Taskbroker.fromEnv(addr);
    queue = "test.java.ops." + Integer.toHexString(ThreadLocalRandom.current().nextInt());
  }

  @AfterEach
  void tearDown() {
    if (tb != null) {
      tb.close();
    }
  }

  @Test
  void getListCancelRequeueAndExplainATaskByStateName() {
    String id =
        tb.submit(tb.spec(queue, Map.of("to", "ada")).setRunAt(ProtoTime.fromNow(Duration.ofHours(1))).build())
            .getTaskId();

    TaskInfo t = tb.getTask(id);
    assertEquals(TaskInfo.State.SCHEDULED, t.state());
    assertEquals("SCHEDULED", t.state().toString());
    assertEquals(queue, t.queue());
    assertEquals("{\"to\":\"ada\"}", new String(t.payload()));
    assertTrue(t.runAt().isAfter(Instant.now().plus(Duration.ofMinutes(50))), "runAt " + t.runAt());

    TaskExplanation why = tb.explainTask(id);
    assertEquals(TaskInfo.State.SCHEDULED, why.state());
    assertEquals(List.of("RUN_AT_IN_FUTURE"), why.gates().stream().map(TaskExplanation.Gate::kind).toList());
    assertNotNull(why.gates().get(0).until());

    List<String> listed =
        tb.listTasks(TaskFilter.all().queue(queue).states(TaskInfo.State.SCHEDULED))
            .map(x -> x.id() + " " + x.state())
            .toList();
    assertEquals(List.of(id + " SCHEDULED"), listed);
    assertEquals(0, tb.listTasks(TaskFilter.all().queue(queue).states(TaskInfo.State.DEAD)).count());

    assertEquals(TaskInfo.State.CANCELLED, tb.cancelTask(id).state());
    assertEquals(TaskInfo.State.READY, tb.requeueTask(id).state());
    assertEquals(
        List.of("NONE"), tb.explainTask(id).gates().stream().map(TaskExplanation.Gate::kind).toList());

    try (Worker w =
        Worker.builder(tb)
            .handle(queue, Map.class, (task, m) -> "sent to " + m.get("to"))
            .pollWait(Duration.ofSeconds(1))
            .build()) {
      w.start();
      tb.waitFor(id, Duration.ofSeconds(30));
    }
    TaskInfo done = tb.getTask(id);
    assertEquals(TaskInfo.State.SUCCEEDED, done.state());
    assertNotNull(done.finishedAt());
    assertEquals("sent to ada", tb.result(done.proto(), String.class));
    assertThrows(StatusRuntimeException.class, () -> tb.requeueTask("no-such-task"));
  }
}
