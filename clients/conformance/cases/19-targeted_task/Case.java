/*
 * The conformance case targeted_task, for the Java client: README.md beside this file says what it
 * does and expects. Compiled from a test source root of clients/java (pom.xml); the harness
 * (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import com.google.protobuf.ByteString;
import dev.taskbroker.client.Routing;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.SubmitRequest;
import dev.taskbroker.v1.TaskSpec;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import static dev.taskbroker.conformance.RoutingCases.*;

final class TargetedTaskCase implements ConformanceCase {
  @Override
  public void run(Taskbroker tb, String queue) throws Exception {
    targetedTask(tb, queue);
  }

  static void targetedTask(Taskbroker tb, String queue) {
    String elsewhere = WORKER_ID + "-elsewhere";
    tb.broker()
        .withDeadlineAfter(10, TimeUnit.SECONDS)
        .submit(
            SubmitRequest.newBuilder()
                .addTasks(
                    TaskSpec.newBuilder()
                        .setQueue(queue)
                        .setPayload(ByteString.copyFromUtf8("a"))
                        .setTarget(Routing.targetLabels(Map.of("gpu", "a100"))))
                .addTasks(
                    TaskSpec.newBuilder()
                        .setQueue(queue)
                        .setPayload(ByteString.copyFromUtf8("b"))
                        .setTarget(Routing.targetWorker(elsewhere)))
                .build());
    List<LeasedTask> got = leaseAs(tb, queue, WORKER_ID, Map.of(), Duration.ZERO);
    check(got.isEmpty(), "a worker without labels leased " + payloads(got));
    Map<String, String> carrying = Map.of("gpu", "a100", "region", "eu");
    got = leaseAs(tb, queue, WORKER_ID, carrying, Duration.ZERO);
    check(
        payloads(got).equals(List.of("a")),
        "the labelled worker leased " + payloads(got) + ", want [a]");
    complete(tb, got.get(0));
    got = leaseAs(tb, queue, WORKER_ID, carrying, Duration.ZERO);
    check(
        got.isEmpty(),
        "the labelled worker leased " + payloads(got) + ", a task targeted at another worker");
    got = leaseAs(tb, queue, elsewhere, Map.of(), Duration.ZERO);
    check(
        payloads(got).equals(List.of("b")),
        elsewhere + " leased " + payloads(got) + ", want [b]");
    complete(tb, got.get(0));
  }
}
