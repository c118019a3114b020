package dev.taskbroker.examples;

import dev.taskbroker.client.PermanentException;
import dev.taskbroker.client.TaskContext;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Objects;

/** Runs a worker on queue "emails" until SIGINT/SIGTERM, then drains. */
public final class RunWorker {
  private RunWorker() {}

  static byte[] sendEmail(TaskContext ctx) throws Exception {
    String payload = ctx.payload().toStringUtf8();
    if (!payload.startsWith("{")) {
      throw new PermanentException("payload is not JSON"); // goes DEAD, no retry
    }
    String last = ctx.lastCheckpoint().map(b -> b.toStringUtf8()).orElse("none");
    System.out.println("attempt " + ctx.attempt() + " for " + payload + ", last checkpoint: " + last);
    ctx.throwIfCancelled(); // lease lost or task cancelled: stop here
    ctx.checkpoint("rendered".getBytes(StandardCharsets.UTF_8));
    return "sent".getBytes(StandardCharsets.UTF_8); // becomes the task's result
  }

  public static void main(String[] args) throws InterruptedException {
    String addr = Objects.requireNonNullElse(System.getenv("TASKBROKER_ADDR"), "127.0.0.1:50051");
    try (Taskbroker tb = Taskbroker.fromEnv(addr)) {
      Worker worker =
          Worker.builder(tb, RunWorker::sendEmail).queues("emails").concurrency(8).build();
      worker.stopOnShutdown(); // SIGTERM (Kubernetes) and Ctrl-C drain the running tasks
      worker.run();
    }
  }
}
