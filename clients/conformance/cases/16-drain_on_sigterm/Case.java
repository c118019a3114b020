/*
 * The conformance case drain_on_sigterm, for the Java client: README.md beside this file says what
 * it does and expects. Compiled from a test source root of clients/java (pom.xml); the harness
 * (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import com.google.protobuf.ByteString;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import dev.taskbroker.v1.TaskSpec;
import dev.taskbroker.v1.TaskState;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import static dev.taskbroker.conformance.SpecCases.*;

final class DrainOnSigtermCase implements ConformanceCase {
  @Override
  public void run(Taskbroker tb, String queue) throws Exception {
    drainOnSigterm(tb, queue);
  }

  /**
   * Java's idiom (docs/client-spec.md): SIGTERM runs the JVM's shutdown hooks, and the hook of
   * {@link Worker#stopOnShutdown()} drains. Signalling our own JVM would end it, so the case checks
   * the hook is registered and runs that same drain.
   */
  static void drainOnSigterm(Taskbroker tb, String queue) throws Exception {
    String a = submit(tb, TaskSpec.newBuilder().setQueue(queue).setPayload(ByteString.copyFromUtf8("a")).build());
    CountDownLatch running = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    Worker w =
        worker(
                tb,
                queue,
                ctx -> {
                  running.countDown();
                  release.await(20, TimeUnit.SECONDS);
                  return "done".getBytes(java.nio.charset.StandardCharsets.UTF_8);
                })
            .concurrency(1)
            .build();
    Thread hook = w.stopOnShutdown();
    check(Runtime.getRuntime().removeShutdownHook(hook), "the shutdown hook was not registered");
    AtomicReference<String> b = new AtomicReference<>();
    Thread operator =
        new Thread(
            () -> {
              try {
                if (!running.await(20, TimeUnit.SECONDS)) {
                  return;
                }
                b.set(submit(tb, TaskSpec.newBuilder().setQueue(queue).setPayload(ByteString.copyFromUtf8("b")).build()));
                Thread sigterm = new Thread(hook); // what the JVM runs on SIGTERM
                sigterm.start();
                Thread.sleep(300);
                release.countDown();
                sigterm.join();
              } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
              }
            });
    operator.start();
    w.run();
    operator.join(20_000);
    check(b.get() != null, "the handler never ran");
    TaskState sa = get(tb, a).getState();
    TaskState sb = get(tb, b.get()).getState();
    check(
        sa == TaskState.TASK_STATE_SUCCEEDED && sb == TaskState.TASK_STATE_READY,
        "a " + sa + ", b " + sb + "; want SUCCEEDED, READY");
  }
}
