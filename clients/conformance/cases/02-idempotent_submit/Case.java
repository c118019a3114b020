/*
 * The conformance case idempotent_submit, for the Java client: README.md beside this file says
 * what it does and expects. Compiled from a test source root of clients/java (pom.xml); the
 * harness (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.v1.SubmitRequest;
import dev.taskbroker.v1.SubmitResponse;
import dev.taskbroker.v1.SubmitResult;

import dev.taskbroker.conformance.Conformance.Mismatch;

final class IdempotentSubmitCase extends StubCase {
  @Override
  void run() throws Exception {
    idempotentSubmit();
  }

  private void idempotentSubmit() throws Mismatch {
    SubmitRequest req = SubmitRequest.newBuilder().addTasks(spec().setKey("order-42")).build();
    SubmitResponse first = broker().submit(req);
    SubmitResponse second = broker().submit(req);
    check(first.getResultsCount() == 1 && second.getResultsCount() == 1, "Submit returned no result");
    SubmitResult a = first.getResults(0);
    SubmitResult b = second.getResults(0);
    check(a.getTaskId().equals(b.getTaskId()), "task ids differ: " + a.getTaskId() + " then " + b.getTaskId());
    check(
        !a.getDeduplicated() && b.getDeduplicated(),
        "deduplicated " + a.getDeduplicated() + " then " + b.getDeduplicated() + ", want false then true");
  }
}
