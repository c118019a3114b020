/*
 * The conformance case bad_input, for the Java client: README.md beside this file says what it
 * does and expects. Compiled from a test source root of clients/java (pom.xml); the harness
 * (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.v1.SubmitRequest;
import dev.taskbroker.v1.TaskSpec;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;

import dev.taskbroker.conformance.Conformance.Mismatch;

final class BadInputCase extends StubCase {
  @Override
  void run() throws Exception {
    badInput();
  }

  private void badInput() throws Mismatch {
    StatusRuntimeException err = null;
    try {
      broker().submit(SubmitRequest.newBuilder().addTasks(TaskSpec.newBuilder().setQueue("has space")).build());
    } catch (StatusRuntimeException e) {
      err = e;
    }
    check(err != null, "Submit with queue \"has space\" succeeded");
    Status s = err.getStatus();
    check(
        s.getCode() == Status.Code.INVALID_ARGUMENT,
        "status " + s.getCode() + " (" + s.getDescription() + "), want INVALID_ARGUMENT");
    String msg = String.valueOf(s.getDescription());
    check(msg.contains("tasks[0].queue"), "message \"" + msg + "\" does not name tasks[0].queue");
  }
}
