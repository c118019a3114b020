package dev.taskbroker.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.taskbroker.client.TaskContext;
import dev.taskbroker.client.Worker;
import dev.taskbroker.client.WorkerStoppedException;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.boot.actuate.health.Health;
import org.springframework.boot.actuate.health.Status;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/**
 * The actuator's taskbroker health: the broker's readiness check (the live broker of test.sh,
 * TASKBROKER_ADDR, and an address nothing listens on) and the workers' state.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class TaskbrokerHealthIndicatorTest {
  private final ApplicationContextRunner runner =
      new ApplicationContextRunner()
          .withConfiguration(AutoConfigurations.of(TaskbrokerAutoConfiguration.class))
          .withBean(Mail.class);

  static class Mail {
    @TaskHandler(queue = "health-emails")
    public void send(String to, TaskContext ctx) {}
  }

  private static String liveBroker() {
    String addr = System.getenv("TASKBROKER_ADDR");
    assertThat(addr).as("TASKBROKER_ADDR is not set: run clients/java-spring/test.sh, which starts a broker").isNotNull();
    return addr;
  }

  @SuppressWarnings("unchecked")
  private static Map<String, Object> worker(Health h, String name) {
    return (Map<String, Object>) ((Map<String, Object>) h.getDetails().get("workers")).get(name);
  }

  @Test
  void upWhenTheBrokerIsServingAndTheWorkersRun() {
    runner
        .withPropertyValues("taskbroker.address=" + liveBroker())
        .run(
            ctx -> {
              Health h = ctx.getBean("taskbrokerHealthIndicator", TaskbrokerHealthIndicator.class).health();
              assertThat(h.getStatus()).isEqualTo(Status.UP);
              assertThat(h.getDetails()).containsEntry("broker", "SERVING");
              assertThat(worker(h, TaskbrokerWorkers.DEFAULT_WORKER))
                  .containsEntry("running", true)
                  .containsEntry("inFlight", 0)
                  .containsKey("workerId")
                  .doesNotContainKey("failure");
            });
  }

  @Test
  void downWhenTheBrokerDoesNotAnswer() {
    runner
        .withPropertyValues("taskbroker.address=127.0.0.1:1", "taskbroker.health.timeout=1s")
        .run(
            ctx -> {
              Health h = ctx.getBean(TaskbrokerHealthIndicator.class).health();
              assertThat(h.getStatus()).isEqualTo(Status.DOWN);
              assertThat((String) h.getDetails().get("broker")).startsWith("UNAVAILABLE");
            });
  }

  @Test
  void downWhenAWorkerStoppedOnItsOwn() {
    // TLS against the broker's plaintext port with fail-fast: the worker stops itself.
    runner
        .withPropertyValues("taskbroker.address=" + liveBroker(), "taskbroker.tls.enabled=true", "taskbroker.fail-fast=true")
        .run(
            ctx -> {
              Worker w = ctx.getBean(TaskbrokerWorkers.class).workers().get(TaskbrokerWorkers.DEFAULT_WORKER);
              assertThatThrownBy(w::awaitStopped).isInstanceOf(WorkerStoppedException.class);
              Health h = ctx.getBean(TaskbrokerHealthIndicator.class).health();
              assertThat(h.getStatus()).isEqualTo(Status.DOWN);
              assertThat(worker(h, TaskbrokerWorkers.DEFAULT_WORKER)).containsEntry("running", false).containsKey("failure");
            });
  }

  @Test
  void inMemoryIsUpWithoutABroker() {
    runner
        .withPropertyValues("taskbroker.address=127.0.0.1:1", "taskbroker.in-memory=true")
        .run(
            ctx -> {
              Health h = ctx.getBean(TaskbrokerHealthIndicator.class).health();
              assertThat(h.getStatus()).isEqualTo(Status.UP);
              assertThat(h.getDetails()).containsEntry("broker", "in-memory");
            });
  }

  @Test
  void managementHealthTaskbrokerEnabledFalseLeavesItOut() {
    runner
        .withPropertyValues("taskbroker.address=127.0.0.1:1", "management.health.taskbroker.enabled=false")
        .run(ctx -> assertThat(ctx).hasNotFailed().doesNotHaveBean(TaskbrokerHealthIndicator.class));
  }

  @Test
  void theReplyOfTheHealthCheckDecodes() {
    assertThat(TaskbrokerHealthIndicator.status(new byte[] {0x08, 0x01})).isEqualTo("SERVING");
    assertThat(TaskbrokerHealthIndicator.status(new byte[] {0x08, 0x02})).isEqualTo("NOT_SERVING");
    assertThat(TaskbrokerHealthIndicator.request("readiness"))
        .startsWith(0x0A, 9)
        .hasSize(11);
  }
}
