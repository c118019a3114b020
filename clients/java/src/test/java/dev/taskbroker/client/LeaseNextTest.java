package dev.taskbroker.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import dev.taskbroker.v1.GetTaskRequest;
import dev.taskbroker.v1.SubmitResult;
import dev.taskbroker.v1.TaskSpec;
import dev.taskbroker.v1.TaskState;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * lease_next against the live broker at $TASKBROKER_ADDR (scripts/conformance.sh java
 * starts one; skipped without it): each settle brings the freed slot's next task.
 */
class LeaseNextTest {
  private Taskbroker tb;
  private String queue;

  @BeforeEach
  void setUp() {
    String addr = System.getenv("TASKBROKER_ADDR");
    Assumptions.assumeTrue(addr != null && !addr.isEmpty(), "TASKBROKER_ADDR is not set");
    tb = Taskbroker.fromEnv(addr);
    queue = "test.java.leasenext." + Integer.toHexString(ThreadLocalRandom.current().nextInt());
  }

  @AfterEach
  void tearDown() {
    if (tb != null) {
      tb.close();
    }
  }

  private List<String> submit(int n) {
    List<TaskSpec> specs = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      specs.add(TaskSpec.newBuilder().setQueue(queue).setPayload(ByteString.copyFromUtf8("" + i)).build());
    }
    return tb.submitAll(specs).stream().map(SubmitResult::getTaskId).toList();
  }

  private TaskState state(String id) {
    return tb.admin()
        .withDeadlineAfter(10, TimeUnit.SECONDS)
        .getTask(GetTaskRequest.newBuilder().setTaskId(id).build())
        .getTask()
        .getState();
  }

  private void awaitSettled(List<String> ids) throws InterruptedException {
    long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
    for (String id : ids) {
      while (state(id) != TaskState.TASK_STATE_SUCCEEDED && state(id) != TaskState.TASK_STATE_DEAD) {
        if (System.nanoTime() > end) {
          throw new AssertionError("task " + id + " is " + state(id));
        }
        Thread.sleep(50);
      }
    }
  }

  private Worker.Builder worker(TaskHandler h) {
    return Worker.builder(tb, h)
        .queues(queue)
        .workerId("test-java")
        .concurrency(1)
        .pollWait(Duration.ofSeconds(1));
  }

  private void runsEachTaskOnce(boolean leaseNext) throws Exception {
    List<String> ids = submit(8);
    List<String> seen = Collections.synchronizedList(new ArrayList<>());
    Worker w =
        worker(
                ctx -> {
                  String p = ctx.payload().toStringUtf8();
                  seen.add(p);
                  if (p.equals("3")) {
                    throw new PermanentException("bad input"); // a Fail carries lease_next too
                  }
                  return new byte[0];
                })
            .leaseNext(leaseNext)
            .build();
    w.start();
    awaitSettled(ids);
    w.close();
    List<String> sorted = new ArrayList<>(seen);
    Collections.sort(sorted);
    assertEquals(List.of("0", "1", "2", "3", "4", "5", "6", "7"), sorted);
    // Concurrency 1 over ready tasks: only the first needs a Lease.
    assertEquals(leaseNext ? ids.size() - 1 : 0, w.leaseNextTasks());
  }

  @Test
  void settlesLeaseTheNextTaskAndEachRunsOnce() throws Exception {
    runsEachTaskOnce(true);
  }

  @Test
  void leaseNextFalseLeasesEveryTaskWithLease() throws Exception {
    runsEachTaskOnce(false);
  }

  @Test
  void stoppingMidStreamLeavesTheRestReady() throws Exception {
    List<String> ids = submit(10);
    List<String> ran = Collections.synchronizedList(new ArrayList<>());
    CountDownLatch third = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    Worker w =
        worker(
                ctx -> {
                  ran.add(ctx.taskId());
                  if (ran.size() == 3) {
                    third.countDown();
                    release.await(10, TimeUnit.SECONDS);
                  }
                  return new byte[0];
                })
            .build();
    w.start();
    assertTrue(third.await(15, TimeUnit.SECONDS), "the third task never ran");
    Thread stopper = new Thread(w::close); // while the third task runs
    stopper.start();
    while (!stopperBlocked(stopper)) {
      Thread.sleep(5);
    }
    release.countDown();
    stopper.join();
    assertEquals(3, ran.size());
    assertEquals(3, new HashSet<>(ran).size());
    for (String id : ids) {
      TaskState want = ran.contains(id) ? TaskState.TASK_STATE_SUCCEEDED : TaskState.TASK_STATE_READY;
      assertEquals(want, state(id), "task " + id);
    }
  }

  /** True once the stopper thread waits in stop() (stopping has begun). */
  private static boolean stopperBlocked(Thread t) {
    Thread.State s = t.getState();
    return s == Thread.State.WAITING || s == Thread.State.TIMED_WAITING;
  }
}
