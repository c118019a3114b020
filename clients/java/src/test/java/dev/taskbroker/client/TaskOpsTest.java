package dev.taskbroker.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;
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

  @Test
  void listTasksFiltersByTargetWorkerTargetLabelsAndMetadata() {
    String forA = submitLater(b -> b.setTarget(Routing.targetWorker("w-a")));
    String gpuEu = submitLater(b -> b.setTarget(Routing.targetLabels(Map.of("gpu", "a100", "zone", "eu"))));
    String gpu = submitLater(b -> b.setTarget(Routing.targetLabels(Map.of("gpu", "a100"))));
    String acme = submitLater(b -> b.putMetadata("tenant.id", "acme"));
    String globex = submitLater(b -> b.putMetadata("tenant.id", "globex").putMetadata("tier", "gold"));
    String plain = submitLater(b -> b);

    assertEquals(Set.of(forA, gpuEu, gpu, acme, globex, plain), ids(TaskFilter.all()));
    assertEquals(Set.of(forA), ids(TaskFilter.all().targetWorker("w-a")));
    assertEquals(Set.of(), ids(TaskFilter.all().targetWorker("w-b")));
    assertEquals(Set.of(gpuEu, gpu), ids(TaskFilter.all().targetLabel("gpu", "a100")));
    assertEquals(Set.of(gpuEu), ids(TaskFilter.all().targetLabel("gpu", "a100").targetLabel("zone", "eu")));
    assertEquals(Set.of(acme, globex), ids(TaskFilter.all().metadataKey("tenant.id")));
    assertEquals(Set.of(acme), ids(TaskFilter.all().metadata("tenant.id", "acme")));
    assertEquals(Set.of(), ids(TaskFilter.all().metadataKey("tier").targetWorker("w-a")));

    StatusRuntimeException err =
        assertThrows(StatusRuntimeException.class, () -> ids(TaskFilter.all().metadata("", "acme")));
    assertEquals(Status.Code.INVALID_ARGUMENT, err.getStatus().getCode());
  }

  private String submitLater(java.util.function.UnaryOperator<dev.taskbroker.v1.TaskSpec.Builder> edit) {
    return tb.submit(edit.apply(tb.spec(queue, "x").setRunAt(ProtoTime.fromNow(Duration.ofHours(1)))).build())
        .getTaskId();
  }

  private Set<String> ids(TaskFilter filter) {
    return tb.listTasks(filter.queue(queue)).map(TaskInfo::id).collect(Collectors.toSet());
  }
}
