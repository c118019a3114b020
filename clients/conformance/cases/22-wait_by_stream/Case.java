/*
 * The conformance case wait_by_stream, for the Java client: README.md beside this file says what
 * it does and expects. Compiled from a test source root of clients/java (pom.xml); the harness
 * (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.WaitTimeoutException;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskState;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import static dev.taskbroker.conformance.FlowCases.*;

final class WaitByStreamCase implements ConformanceCase {
  @Override
  public void run(Taskbroker tb, String queue) throws Exception {
    waitByStream(tb, queue);
  }

  static void waitByStream(Taskbroker tb, String queue) throws Exception {
    String w = tb.submit(spec(queue, "w")).getTaskId();
    CompletableFuture<Task> waiting =
        CompletableFuture.supplyAsync(() -> tb.waitFor(w, Duration.ofSeconds(20)));
    List<LeasedTask> got = lease(tb, queue, 1, Duration.ofSeconds(10));
    check(
        got.size() == 1 && got.get(0).getTaskId().equals(w),
        "Lease returned " + payloads(got) + ", want " + w);
    complete(tb, got.get(0), "waited");
    Task t = waiting.get(30, TimeUnit.SECONDS);
    check(
        t.getState() == TaskState.TASK_STATE_SUCCEEDED
            && t.getResult().toStringUtf8().equals("waited"),
        "wait returned " + t.getState() + " with " + t.getResult().toStringUtf8()
            + ", want SUCCEEDED \"waited\"");
    Task again = tb.waitFor(w, Duration.ofSeconds(5));
    check(
        again.getState() == TaskState.TASK_STATE_SUCCEEDED,
        "second wait returned " + again.getState());
    String x = tb.submit(spec(queue, "x")).getTaskId();
    try {
      tb.waitFor(x, Duration.ofMillis(500));
      check(false, "the wait on x returned; want WaitTimeoutException");
    } catch (WaitTimeoutException expected) {
      // The client's timeout error.
    }
    Task tx = get(tb, x);
    check(
        tx.getState() == TaskState.TASK_STATE_READY,
        "x is " + tx.getState() + " after the timeout, want READY");
  }
}
