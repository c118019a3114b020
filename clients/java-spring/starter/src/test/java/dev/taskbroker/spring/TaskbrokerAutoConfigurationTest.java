package dev.taskbroker.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.taskbroker.client.TaskContext;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import dev.taskbroker.client.WorkerStoppedException;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/**
 * The auto-configuration in a real application context: properties to client and workers,
 * @TaskHandler methods to registrations, and the start refused with a plain message for a
 * configuration that cannot work. The workers lease from an address nothing listens on, except
 * where a test says otherwise (the live broker of test.sh, TASKBROKER_ADDR); the sample's tests
 * run tasks through it.
 */
class TaskbrokerAutoConfigurationTest {
  private final ApplicationContextRunner runner =
      new ApplicationContextRunner()
          .withConfiguration(AutoConfigurations.of(TaskbrokerAutoConfiguration.class))
          .withPropertyValues("taskbroker.address=127.0.0.1:1", "taskbroker.workers-enabled=true");

  record Email(String to) {}

  static class Mail {
    @TaskHandler(queue = "emails")
    public String send(Email email, TaskContext ctx) {
      return email.to();
    }
  }

  static class Thumbs {
    @TaskHandler(queue = "thumbs")
    public byte[] make(TaskContext ctx, byte[] image) {
      return image;
    }

    @TaskHandler(queue = "reports")
    public void report(List<Email> batch) {}
  }

  static class AlsoMail {
    @TaskHandler(queue = "emails")
    public void again(Email email) {}
  }

  static class TwoPayloads {
    @TaskHandler(queue = "bad")
    public void handle(Email a, Email b) {}
  }

  private static Throwable rootCause(Throwable t) {
    assertThat(t).as("the context failed to start").isNotNull();
    return org.springframework.core.NestedExceptionUtils.getMostSpecificCause(t);
  }

  private static Map<String, Worker> workers(org.springframework.context.ApplicationContext ctx) {
    return ctx.getBean(TaskbrokerWorkers.class).workers();
  }

  @Test
  void withNoWorkerConfiguredOneDefaultWorkerTakesEveryHandler() {
    runner
        .withBean(Mail.class)
        .withBean(Thumbs.class)
        .run(
            ctx -> {
              assertThat(ctx).hasNotFailed().hasSingleBean(Taskbroker.class);
              assertThat(workers(ctx)).containsOnlyKeys(TaskbrokerWorkers.DEFAULT_WORKER);
              Worker w = workers(ctx).get(TaskbrokerWorkers.DEFAULT_WORKER);
              assertThat(w.queues()).containsExactlyInAnyOrder("emails", "thumbs", "reports");
              assertThat(w.isRunning()).isTrue();
              assertThat(ctx.getBean(TaskHandlerMethods.class).handlers())
                  .extracting(TaskHandlerMethods.Handler::queue)
                  .containsExactlyInAnyOrder("emails", "thumbs", "reports");
            });
  }

  @Test
  void workerPropertiesReachTheWorkers() {
    runner
        .withBean(Mail.class)
        .withBean(Thumbs.class)
        .withPropertyValues(
            "taskbroker.workers.mail.queues=emails",
            "taskbroker.workers.mail.worker-id=mailer-1",
            "taskbroker.workers.mail.labels.region=eu",
            "taskbroker.workers.mail.concurrency=8",
            "taskbroker.workers.rest.worker-id=rest-1")
        .run(
            ctx -> {
              assertThat(ctx).hasNotFailed();
              Worker mail = workers(ctx).get("mail");
              assertThat(mail.queues()).containsExactly("emails");
              assertThat(mail.workerId()).isEqualTo("mailer-1");
              assertThat(mail.labels()).isEqualTo(Map.of("region", "eu"));
              Worker rest = workers(ctx).get("rest");
              assertThat(rest.queues()).containsExactlyInAnyOrder("thumbs", "reports");
              assertThat(rest.workerId()).isEqualTo("rest-1");
            });
  }

  @Test
  void stoppingTheContextStopsTheWorkers() {
    Worker[] seen = new Worker[1];
    runner
        .withBean(Mail.class)
        .run(
            ctx -> {
              seen[0] = workers(ctx).get(TaskbrokerWorkers.DEFAULT_WORKER);
              assertThat(seen[0].isRunning()).isTrue();
            });
    assertThat(seen[0].isRunning()).isFalse();
  }

  @Test
  void aNonDaemonThreadKeepsTheJvmAliveUntilTheContextCloses() throws Exception {
    Thread[] seen = new Thread[1];
    runner
        .withBean(Mail.class)
        .run(
            ctx -> {
              seen[0] = ctx.getBean(TaskbrokerWorkers.class).keepAliveThread();
              assertThat(seen[0]).as("a keep-alive thread while the worker runs").isNotNull();
              assertThat(seen[0].isDaemon()).isFalse();
              assertThat(seen[0].isAlive()).isTrue();
            });
    seen[0].join(10_000);
    assertThat(seen[0].isAlive()).as("the keep-alive thread ends when the context closes").isFalse();
  }

  @Test
  void theKeepAliveThreadEndsWhenTheLastWorkerStopsOnItsOwn() throws Exception {
    String addr = System.getenv("TASKBROKER_ADDR");
    assertThat(addr).as("TASKBROKER_ADDR is not set: run clients/java-spring/test.sh, which starts a broker").isNotNull();
    // TLS against the broker's plaintext port with fail-fast: the worker stops itself.
    runner
        .withBean(Mail.class)
        .withPropertyValues("taskbroker.address=" + addr, "taskbroker.tls.enabled=true", "taskbroker.fail-fast=true")
        .run(
            ctx -> {
              Thread keepAlive = ctx.getBean(TaskbrokerWorkers.class).keepAliveThread();
              assertThat(keepAlive).isNotNull();
              Worker w = workers(ctx).get(TaskbrokerWorkers.DEFAULT_WORKER);
              assertThatThrownBy(w::awaitStopped).isInstanceOf(WorkerStoppedException.class);
              keepAlive.join(10_000);
              assertThat(keepAlive.isAlive())
                  .as("no worker left: the JVM may exit, though the context is open")
                  .isFalse();
            });
  }

  @Test
  void keepAliveFalseStartsNoKeepAliveThread() {
    runner
        .withBean(Mail.class)
        .withPropertyValues("taskbroker.keep-alive=false")
        .run(
            ctx -> {
              assertThat(workers(ctx).get(TaskbrokerWorkers.DEFAULT_WORKER).isRunning()).isTrue();
              assertThat(ctx.getBean(TaskbrokerWorkers.class).keepAliveThread()).isNull();
            });
  }

  @Test
  void noHandlerStartsNoKeepAliveThread() {
    runner.run(ctx -> assertThat(ctx.getBean(TaskbrokerWorkers.class).keepAliveThread()).isNull());
  }

  @Test
  void workersDisabledStartsNone() {
    runner
        .withBean(Mail.class)
        .withPropertyValues("taskbroker.workers-enabled=false")
        .run(ctx -> assertThat(workers(ctx)).isEmpty());
  }

  @Test
  void aQueueWithTwoHandlersFailsTheStart() {
    runner
        .withBean(Mail.class)
        .withBean(AlsoMail.class)
        .run(
            ctx ->
                assertThat(rootCause(ctx.getStartupFailure()))
                    .hasMessageContaining("queue emails has two @TaskHandler methods"));
  }

  @Test
  void aHandlerWithTwoPayloadParametersFailsTheStart() {
    runner
        .withBean(TwoPayloads.class)
        .run(
            ctx ->
                assertThat(rootCause(ctx.getStartupFailure()))
                    .hasMessageContaining("at most one payload parameter"));
  }

  @Test
  void aListedQueueWithoutHandlerFailsTheStart() {
    runner
        .withBean(Mail.class)
        .withPropertyValues("taskbroker.workers.mail.queues=emails,sms")
        .run(
            ctx ->
                assertThat(rootCause(ctx.getStartupFailure()))
                    .hasMessage("taskbroker.workers.mail.queues: queue sms has no @TaskHandler method"));
  }

  @Test
  void aHandlerInNoWorkerFailsTheStart() {
    runner
        .withBean(Mail.class)
        .withBean(Thumbs.class)
        .withPropertyValues("taskbroker.workers.mail.queues=emails")
        .run(
            ctx ->
                assertThat(rootCause(ctx.getStartupFailure()))
                    .hasMessageContaining("queue thumbs is in no worker"));
  }

  @Test
  void aWrongWorkerSettingNamesTheWorker() {
    runner
        .withBean(Mail.class)
        .withPropertyValues("taskbroker.workers.mail.concurrency=0")
        .run(
            ctx ->
                assertThat(ctx.getStartupFailure())
                    .hasMessage("taskbroker.workers.mail: concurrency must be 1 to 256"));
  }
}
