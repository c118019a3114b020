/*
 * The conformance case dependency_results, for the Java client: README.md beside this file says
 * what it does and expects. Compiled from a test source root of clients/java (pom.xml); the
 * harness (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import dev.taskbroker.v1.GetTaskRequest;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskState;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import static dev.taskbroker.conformance.ResultsCases.*;

final class DependencyResultsCase implements ConformanceCase {
  @Override
  public void run(Taskbroker tb, String queue) throws Exception {
    dependencyResults(tb, queue);
  }

  static void dependencyResults(Taskbroker tb, String queue) throws Exception {
    String a = tb.submit(spec(queue, "a")).getTaskId();
    String b = tb.submit(spec(queue, "b").toBuilder().addDependsOn(a).build()).getTaskId();
    Map<String, String> seen = new java.util.concurrent.ConcurrentHashMap<>();
    Worker w =
        Worker.builder(tb)
            .handle(
                queue,
                ctx -> {
                  if (ctx.taskId().equals(a)) {
                    return "a-result".getBytes(java.nio.charset.StandardCharsets.UTF_8);
                  }
                  ctx.dependencyResults().forEach((id, r) -> seen.put(id, r.toStringUtf8()));
                  return ctx.dependencyResult(a, byte[].class);
                })
            .workerId(WORKER_ID)
            .pollWait(Duration.ofSeconds(1))
            .build();
    w.start();
    try {
      tb.waitFor(b, Duration.ofSeconds(20));
    } finally {
      w.stop(Duration.ofSeconds(5));
    }
    check(seen.equals(Map.of(a, "a-result")), "b's handler saw dependency_results " + seen + ", want {" + a + "=a-result}");
    Task tbk = tb.admin().getTask(GetTaskRequest.newBuilder().setTaskId(b).build()).getTask();
    check(
        tbk.getState() == TaskState.TASK_STATE_SUCCEEDED && tbk.getResult().toStringUtf8().equals("a-result"),
        "b is " + tbk.getState() + " with result " + tbk.getResult().toStringUtf8() + ", want SUCCEEDED with a-result");
  }
}
