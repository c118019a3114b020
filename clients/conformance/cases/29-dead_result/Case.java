/*
 * The conformance case dead_result, for the Java client: README.md beside this file says what it
 * does and expects. Compiled from a test source root of clients/java (pom.xml); the harness
 * (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.client.PermanentException;
import dev.taskbroker.client.TaskFailedException;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import dev.taskbroker.v1.TaskState;
import java.time.Duration;
import java.util.List;
import static dev.taskbroker.conformance.ResultsCases.*;

final class DeadResultCase implements ConformanceCase {
  @Override
  public void run(Taskbroker tb, String queue) throws Exception {
    deadResult(tb, queue);
  }

  /**
   * {@code dead_result}: a task whose handler fails for good; waiting for it, and its typed
   * result getter, throw TaskFailedException with its id, state DEAD and the handler's message.
   */
  static void deadResult(Taskbroker tb, String queue) throws Exception {
    String d = tb.submit(queue, "order-7").getTaskId();
    Worker w =
        Worker.builder(tb)
            .handle(
                queue,
                ctx -> {
                  throw new PermanentException("no such order");
                })
            .workerId(WORKER_ID)
            .pollWait(Duration.ofSeconds(1))
            .build();
    w.start();
    TaskFailedException waited = null;
    try {
      tb.waitFor(d, Duration.ofSeconds(20));
    } catch (TaskFailedException e) {
      waited = e;
    } finally {
      w.stop(Duration.ofSeconds(5));
    }
    check(waited != null, "waitFor returned, want a TaskFailedException");
    TaskFailedException read = null;
    try {
      tb.result(waited.task(), String.class);
    } catch (TaskFailedException e) {
      read = e;
    }
    check(read != null, "result() returned, want a TaskFailedException");
    for (TaskFailedException e : List.of(waited, read)) {
      check(
          e.taskId().equals(d)
              && e.state() == TaskState.TASK_STATE_DEAD
              && e.lastError().equals("no such order"),
          "TaskFailedException {" + e.taskId() + ", " + e.state() + ", " + e.lastError()
              + "}, want {" + d + ", DEAD, no such order}");
    }
  }
}
