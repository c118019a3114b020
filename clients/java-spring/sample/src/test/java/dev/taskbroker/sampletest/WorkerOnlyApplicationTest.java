package dev.taskbroker.sampletest;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.sample.Mailer;
import dev.taskbroker.sample.SampleApplication;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskState;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The sample application as it is deployed: its own JVM, no web server
 * ({@code spring.main.web-application-type=none}), against the live broker (TASKBROKER_ADDR).
 * It keeps running after its start and handles a task submitted then; SIGTERM closes the
 * context, the worker drains, and the JVM exits.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class WorkerOnlyApplicationTest {
  private static final String EXITED = "\u0000exited";

  @Test
  void workerOnlyApplicationKeepsRunningHandlesATaskAndStopsOnSigterm() throws Exception {
    String addr = System.getenv("TASKBROKER_ADDR");
    assertNotNull(addr, "TASKBROKER_ADDR is not set: run clients/java-spring/test.sh, which starts a broker");
    String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
    String classpath = System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
    ProcessBuilder pb =
        new ProcessBuilder(
                java,
                "-cp",
                classpath,
                SampleApplication.class.getName(),
                "--taskbroker.address=" + addr,
                "--spring.main.web-application-type=none",
                "--spring.main.banner-mode=off",
                "--taskbroker.workers.mail.stop-timeout=2s")
            .redirectErrorStream(true);
    Process app = pb.start();
    LinkedBlockingQueue<String> lines = new LinkedBlockingQueue<>();
    StringBuffer log = new StringBuffer();
    Thread reader =
        new Thread(
            () -> {
              try (BufferedReader r =
                  new BufferedReader(new InputStreamReader(app.getInputStream(), StandardCharsets.UTF_8))) {
                for (String line; (line = r.readLine()) != null; ) {
                  log.append(line).append('\n');
                  lines.add(line);
                }
              } catch (java.io.IOException e) {
                log.append("reading the output: ").append(e).append('\n');
              }
              lines.add(EXITED);
            },
            "sample-output");
    reader.setDaemon(true);
    reader.start();
    try (Taskbroker tb = Taskbroker.connect(addr)) {
      awaitLine(lines, "taskbroker worker mail (", log);

      String to = UUID.randomUUID() + "@example.com";
      String id = tb.submit("emails", new Mailer.Email(to, "after start")).getTaskId();
      Task done = tb.waitFor(id, Duration.ofSeconds(30));
      assertEquals(TaskState.TASK_STATE_SUCCEEDED, done.getState(), "the application's handler ran it:\n" + log);
      assertEquals("msg-" + to, tb.result(done, Mailer.Sent.class).messageId());
      assertTrue(app.isAlive(), "the application still runs after handling the task:\n" + log);

      // SIGTERM: Spring Boot's shutdown hook closes the context. Through the ProcessHandle, as
      // Process.destroy() would also close the output stream being read.
      assertTrue(app.toHandle().destroy(), "SIGTERM sent");
      assertTrue(app.waitFor(60, TimeUnit.SECONDS), "the application exits after SIGTERM:\n" + log);
      reader.join(10_000);
      assertTrue(
          log.toString().contains("taskbroker worker mail stopped in"),
          "the worker was stopped by the context's close:\n" + log);
      assertEquals(143, app.exitValue(), "the JVM's exit status after SIGTERM:\n" + log);
    } finally {
      app.destroyForcibly();
    }
  }

  /** Waits for a line containing {@code text}; fails if the process ends first. */
  private static void awaitLine(LinkedBlockingQueue<String> lines, String text, StringBuffer log)
      throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    while (true) {
      String line = lines.poll(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
      assertNotNull(line, "no line with \"" + text + "\" within 60 s:\n" + log);
      assertTrue(!EXITED.equals(line), "the application exited before logging \"" + text + "\":\n" + log);
      if (line.contains(text)) {
        return;
      }
    }
  }
}
