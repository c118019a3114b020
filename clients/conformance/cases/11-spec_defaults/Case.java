/*
 * The conformance case spec_defaults, for the Java client: README.md beside this file says what it
 * does and expects. Compiled from a test source root of clients/java (pom.xml); the harness
 * (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.client.Backoff;
import dev.taskbroker.client.ErrorDetails;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import io.grpc.Status;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import static dev.taskbroker.conformance.SpecCases.*;

final class SpecDefaultsCase implements ConformanceCase {
  @Override
  public void run(Taskbroker tb, String queue) throws Exception {
    specDefaults(tb, queue);
  }

  static void specDefaults(Taskbroker tb, String queue) {
    check(Worker.DEFAULT_CONCURRENCY == 4, "concurrency " + Worker.DEFAULT_CONCURRENCY);
    check(Worker.DEFAULT_POLL_WAIT.equals(Duration.ofSeconds(10)), "poll wait " + Worker.DEFAULT_POLL_WAIT);
    check(
        Worker.DEFAULT_LEASE_DURATION.equals(Duration.ofSeconds(30)),
        "lease " + Worker.DEFAULT_LEASE_DURATION);
    check(
        Worker.DEFAULT_LEASE_DURATION.dividedBy(3).equals(Duration.ofSeconds(10)),
        "heartbeat interval");
    check(
        Worker.DEFAULT_STOP_TIMEOUT.equals(Duration.ofSeconds(30)),
        "stop timeout " + Worker.DEFAULT_STOP_TIMEOUT);
    check(
        Backoff.ceiling(0).equals(Duration.ofMillis(200))
            && Backoff.ceiling(10).equals(Duration.ofSeconds(10)),
        "backoff ceilings " + Backoff.ceiling(0) + " " + Backoff.ceiling(10));
    Set<Duration> draws = new HashSet<>();
    for (int i = 0; i < 50; i++) {
      Duration d = Backoff.delay(3);
      check(d.toMillis() >= 160 && d.toMillis() <= 1600, "Backoff.delay(3) = " + d);
      draws.add(d);
    }
    check(draws.size() > 1, "Backoff.delay(3) has no jitter");
    for (Status.Code c :
        List.of(
            Status.Code.UNAUTHENTICATED,
            Status.Code.PERMISSION_DENIED,
            Status.Code.INVALID_ARGUMENT,
            Status.Code.UNIMPLEMENTED)) {
      check(ErrorDetails.stopsWorker(c), "stopsWorker(" + c + ") false");
    }
    check(!ErrorDetails.stopsWorker(Status.Code.UNAVAILABLE), "stopsWorker(UNAVAILABLE) true");
  }
}
