package dev.taskbroker.examples;

import com.google.protobuf.ByteString;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.v1.RetryPolicy;
import dev.taskbroker.v1.SubmitRequest;
import dev.taskbroker.v1.SubmitResult;
import dev.taskbroker.v1.TaskSpec;
import java.util.Objects;
import java.util.concurrent.TimeUnit;

/** Submits one task and prints its id. {@code TASKBROKER_ADDR=127.0.0.1:50051}. */
public final class Submit {
  private Submit() {}

  public static void main(String[] args) {
    String addr = Objects.requireNonNullElse(System.getenv("TASKBROKER_ADDR"), "127.0.0.1:50051");
    try (Taskbroker tb = Taskbroker.fromEnv(addr)) {
      SubmitResult r =
          tb.broker()
              .withDeadlineAfter(10, TimeUnit.SECONDS)
              .submit(
                  SubmitRequest.newBuilder()
                      .addTasks(
                          TaskSpec.newBuilder()
                              .setQueue("emails")
                              .setPayload(ByteString.copyFromUtf8("{\"to\":\"ada@example.com\"}"))
                              .setKey("welcome-ada") // a second submit returns the same task
                              .setPriority(5)
                              .setRetry(RetryPolicy.newBuilder().setMaxAttempts(5)))
                      .build())
              .getResults(0);
      System.out.println("task " + r.getTaskId() + " (deduplicated: " + r.getDeduplicated() + ")");
    }
  }
}
