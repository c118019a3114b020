/*
 * The conformance case lease_order, for the Java client: README.md beside this file says what it
 * does and expects. Compiled from a test source root of clients/java (pom.xml); the harness
 * (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.v1.LeaseRequest;
import dev.taskbroker.v1.LeaseResponse;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.SubmitRequest;
import dev.taskbroker.v1.SubmitResponse;
import dev.taskbroker.v1.TaskSpec;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.stream.Collectors;
import static dev.taskbroker.client.ProtoTime.duration;
import static dev.taskbroker.client.ProtoTime.timestamp;

import dev.taskbroker.conformance.Conformance.Mismatch;

final class LeaseOrderCase extends StubCase {
  @Override
  void run() throws Exception {
    leaseOrder();
  }

  private void leaseOrder() throws Mismatch {
    Instant now = Instant.now();
    Duration hour = Duration.ofHours(1);
    List<TaskSpec> tasks =
        List.of(
            spec().setPayload(bytes("a")).setPriority(0).build(),
            spec().setPayload(bytes("b")).setPriority(5).build(),
            spec().setPayload(bytes("c")).setPriority(5).setDeadline(timestamp(now.plus(hour.multipliedBy(2)))).build(),
            spec().setPayload(bytes("d")).setPriority(5).setDeadline(timestamp(now.plus(hour))).build(),
            spec().setPayload(bytes("e")).setPriority(-1).build(),
            spec().setPayload(bytes("f")).setPriority(10).setRunAt(timestamp(now.plus(hour))).build());
    SubmitResponse sub = broker().submit(SubmitRequest.newBuilder().addAllTasks(tasks).build());
    check(sub.getResultsCount() == 6, "Submit returned " + sub.getResultsCount() + " results, want 6");
    LeaseResponse res =
        broker()
            .lease(
                LeaseRequest.newBuilder()
                    .setWorkerId(WORKER_ID)
                    .addQueues(queue)
                    .setMaxTasks(10)
                    .setLeaseDuration(duration(Duration.ofSeconds(30)))
                    .setWait(duration(Duration.ZERO))
                    .build());
    String got =
        res.getTasksList().stream().map(t -> t.getPayload().toStringUtf8()).collect(Collectors.joining(","));
    check(got.equals("d,c,b,a,e"), "leased payloads [" + got + "], want [d,c,b,a,e]");
    String attempts =
        res.getTasksList().stream().map(t -> String.valueOf(t.getAttempt())).collect(Collectors.joining(","));
    check(res.getTasksList().stream().allMatch(t -> t.getAttempt() == 1), "attempts [" + attempts + "], want all 1");
    for (LeasedTask t : res.getTasksList()) {
      complete(t);
    }
  }
}
