/*
 * The conformance case typed_handlers, for the Java client: README.md beside this file says what
 * it does and expects. Compiled from a test source root of clients/java (pom.xml); the harness
 * (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskState;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import static dev.taskbroker.conformance.TypedCases.*;

final class TypedHandlersCase implements ConformanceCase {
  @Override
  public void run(Taskbroker tb, String queue) throws Exception {
    typedHandlers(tb, queue);
  }

  static void typedHandlers(Taskbroker tb, String queue) throws Exception {
    String rand = queue.substring(queue.lastIndexOf('.') + 1);
    String a = "conf.java.typed_a." + rand;
    String b = "conf.java.typed_b." + rand;
    InMemoryMetricReader reader = InMemoryMetricReader.create();
    SdkMeterProvider meters = SdkMeterProvider.builder().registerMetricReader(reader).build();
    // task id -> "queue outcome", as the middleware saw it
    Map<String, String> seen = new ConcurrentHashMap<>();
    List<String> wrong = java.util.Collections.synchronizedList(new ArrayList<>());
    Worker w =
        Worker.builder(tb)
            .handle(
                a,
                Email.class,
                (task, email) -> {
                  if (!Objects.equals(email.to(), "a@example.com") || email.n() != 1) {
                    wrong.add("handler A got " + email);
                  }
                  return new Ok(true, email.n());
                })
            .handle(
                b,
                Count.class,
                (task, count) -> {
                  if (count.n() != 2) {
                    wrong.add("handler B got " + count);
                  }
                  return new Ok(true, count.n());
                })
            .middleware(
                (task, next) -> {
                  String outcome = "error";
                  try {
                    Object v = next.proceed();
                    outcome = "success";
                    return v;
                  } finally {
                    seen.put(task.taskId(), task.queue() + " " + outcome);
                  }
                })
            .meterProvider(meters)
            .workerId("conf-java")
            .pollWait(Duration.ofSeconds(1))
            .concurrency(3)
            .build();
    w.start();
    String idA;
    String idB;
    String idBad;
    List<Task> done;
    try {
      idA = tb.submit(a, new Email("a@example.com", 1)).getTaskId();
      idB = tb.submit(b, new Count(2)).getTaskId();
      idBad = tb.submit(a, "not json".getBytes(StandardCharsets.UTF_8)).getTaskId();
      done = tb.waitForAll(List.of(idA, idB, idBad), Duration.ofSeconds(20));
    } finally {
      // Stopped before the metrics are read: every attempt is counted once the worker drained.
      w.stop(Duration.ofSeconds(5));
    }
    check(wrong.isEmpty(), String.join("; ", wrong));
    Task ta = done.get(0);
    Task tbk = done.get(1);
    Task bad = done.get(2);
    check(ta.getState() == TaskState.TASK_STATE_SUCCEEDED, "task A is " + ta.getState() + " (" + ta.getLastError() + ")");
    check(tbk.getState() == TaskState.TASK_STATE_SUCCEEDED, "task B is " + tbk.getState() + " (" + tbk.getLastError() + ")");
    check(new Ok(true, 1).equals(tb.result(ta, Ok.class)), "task A's result is " + ta.getResult().toStringUtf8());
    check(new Ok(true, 2).equals(tb.result(tbk, Ok.class)), "task B's result is " + tbk.getResult().toStringUtf8());
    check(bad.getState() == TaskState.TASK_STATE_DEAD, "the undecodable task is " + bad.getState() + ", want DEAD");
    check(
        bad.getLastError().contains("payload is not a valid Email") && bad.getLastError().contains(a),
        "its last_error does not name the queue and type: " + bad.getLastError());
    check((a + " success").equals(seen.get(idA)), "middleware saw task A as " + seen.get(idA));
    check((b + " success").equals(seen.get(idB)), "middleware saw task B as " + seen.get(idB));
    check((a + " error").equals(seen.get(idBad)), "middleware saw the undecodable task as " + seen.get(idBad));
    long okA = tasks(reader, a, "succeeded");
    long okB = tasks(reader, b, "succeeded");
    long failedA = tasks(reader, a, "failed");
    check(okA == 1 && okB == 1 && failedA == 1,
        "taskbroker.worker.tasks: A succeeded " + okA + ", B succeeded " + okB + ", A failed " + failedA + "; want 1, 1, 1");
    meters.close();
  }
}
