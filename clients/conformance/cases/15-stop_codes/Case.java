/*
 * The conformance case stop_codes, for the Java client: README.md beside this file says what it
 * does and expects. Compiled from a test source root of clients/java (pom.xml); the harness
 * (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.WorkerStoppedException;
import io.grpc.Status;
import java.io.File;
import static dev.taskbroker.conformance.SpecCases.*;

final class StopCodesCase implements ConformanceCase {
  @Override
  public void run(Taskbroker tb, String queue) throws Exception {
    stopCodes(tb, queue);
  }

  static void stopCodes(Taskbroker tb, String queue) throws Exception {
    Throwable err = runUntilStopped(worker(tb, "has space", ctx -> null).build());
    check(
        err instanceof WorkerStoppedException
            && Status.fromThrowable(err).getCode() == Status.Code.INVALID_ARGUMENT,
        "bad queue: run() ended with " + err + ", want WorkerStoppedException INVALID_ARGUMENT");
    String token = System.getenv("TASKBROKER_TOKEN");
    if (token == null || token.isEmpty()) {
      return;
    }
    try (Taskbroker bad =
        Taskbroker.builder(System.getenv("TASKBROKER_ADDR"))
            .token("wrong-token-0123456789")
            .tls(
                new File(System.getenv("TASKBROKER_CA")),
                new File(System.getenv("TASKBROKER_CLIENT_CERT")),
                new File(System.getenv("TASKBROKER_CLIENT_KEY")))
            .build()) {
      err = runUntilStopped(worker(bad, queue, ctx -> null).build());
    }
    check(
        err instanceof WorkerStoppedException
            && Status.fromThrowable(err).getCode() == Status.Code.UNAUTHENTICATED,
        "wrong token: run() ended with " + err + ", want WorkerStoppedException UNAUTHENTICATED");
  }
}
