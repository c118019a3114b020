package dev.taskbroker.spring;

import static org.assertj.core.api.Assertions.assertThat;

import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import dev.taskbroker.client.testing.InMemoryBroker;
import dev.taskbroker.client.testing.Outcome;
import dev.taskbroker.v1.GetTaskRequest;
import dev.taskbroker.v1.RetryPolicy;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskState;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/**
 * The @TaskHandler attributes beyond the queue: retry defaults put on the tasks this
 * application's client submits (the spec's own fields win, field by field), exceptions that fail
 * for good, and a queue's own concurrency in a worker of its own. The submit-side defaults are
 * checked on the in-memory fake and on the live broker (TASKBROKER_ADDR, from test.sh).
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class TaskHandlerAttributesTest {
  private final ApplicationContextRunner runner =
      new ApplicationContextRunner()
          .withConfiguration(AutoConfigurations.of(TaskbrokerAutoConfiguration.class))
          .withPropertyValues("taskbroker.address=127.0.0.1:1");

  private static com.google.protobuf.Duration seconds(long s) {
    return com.google.protobuf.Duration.newBuilder().setSeconds(s).build();
  }

  private static String liveBroker() {
    String addr = System.getenv("TASKBROKER_ADDR");
    assertThat(addr).as("TASKBROKER_ADDR is not set: run clients/java-spring/test.sh, which starts a broker").isNotNull();
    return addr;
  }

  static class Charges {
    final AtomicInteger calls = new AtomicInteger();

    @TaskHandler(
        queue = "charges",
        maxAttempts = 5,
        backoff = "2s",
        backoffMultiplier = 3,
        maxBackoff = "1m",
        nonRetryable = IllegalArgumentException.class)
    public void charge(String how) {
      calls.incrementAndGet();
      switch (how) {
        case "bad-card" -> throw new IllegalArgumentException("card declined");
        case "wrapped" -> throw new IllegalStateException("gateway", new IllegalArgumentException("card declined"));
        case "flaky" -> throw new IllegalStateException("gateway timeout");
        default -> {}
      }
    }
  }

  @Test
  void aListedExceptionFailsTheTaskAtOnceAndOthersAreRetried() {
    runner
        .withBean(Charges.class)
        .withPropertyValues("taskbroker.in-memory=true")
        .run(
            ctx -> {
              Taskbroker tb = ctx.getBean(Taskbroker.class);
              InMemoryBroker fake = ctx.getBean(InMemoryBroker.class);

              String bad = tb.submit("charges", "bad-card").getTaskId();
              assertThat(fake.getTask(bad).getState()).isEqualTo(TaskState.TASK_STATE_DEAD);
              assertThat(fake.outcomes(bad)).singleElement().satisfies(o -> assertThat(o.permanent()).isTrue());

              String wrapped = tb.submit("charges", "wrapped").getTaskId();
              assertThat(fake.outcomes(wrapped)).as("a listed cause counts too").hasSize(1);

              String flaky = tb.submit("charges", "flaky").getTaskId();
              assertThat(fake.outcomes(flaky))
                  .as("not listed: retried up to the annotation's maxAttempts")
                  .hasSize(5)
                  .allSatisfy(o -> assertThat(o.retryable()).isTrue());
              assertThat(fake.outcomes(flaky)).extracting(Outcome::errorMessage).first().asString().contains("gateway timeout");
            });
  }

  @Test
  void theAnnotationFillsTheRetryFieldsTheSpecLeavesUnset() {
    runner
        .withBean(Charges.class)
        .withPropertyValues("taskbroker.in-memory=true")
        .run(
            ctx -> {
              Taskbroker tb = ctx.getBean(Taskbroker.class);
              InMemoryBroker fake = ctx.getBean(InMemoryBroker.class);
              Task plain = fake.getTask(tb.submit("charges", "ok").getTaskId());
              assertThat(plain.getMaxAttempts()).isEqualTo(5);
              assertThat(plain.getRetry().getInitialBackoff()).isEqualTo(seconds(2));
              assertThat(plain.getRetry().getBackoffMultiplier()).isEqualTo(3.0);
              assertThat(plain.getRetry().getMaxBackoff()).isEqualTo(seconds(60));

              Task own =
                  fake.getTask(
                      tb.submit(
                              tb.spec("charges", "ok")
                                  .setRetry(RetryPolicy.newBuilder().setMaxAttempts(2))
                                  .build())
                          .getTaskId());
              assertThat(own.getMaxAttempts()).as("the spec's own max attempts win").isEqualTo(2);
              assertThat(own.getRetry().getInitialBackoff()).isEqualTo(seconds(2));
            });
  }

  @Test
  void theLiveBrokerKeepsTheAnnotationsRetryPolicyOnTheTask() {
    String queue = "charges";
    runner
        .withBean(Charges.class)
        .withPropertyValues("taskbroker.address=" + liveBroker(), "taskbroker.workers-enabled=false")
        .run(
            ctx -> {
              Taskbroker tb = ctx.getBean(Taskbroker.class);
              String key = "k-" + UUID.randomUUID();
              String id = tb.submit(tb.spec(queue, "ok").setKey(key).build()).getTaskId();
              Task t = tb.admin().getTask(GetTaskRequest.newBuilder().setTaskId(id).build()).getTask();
              assertThat(t.getMaxAttempts()).isEqualTo(5);
              assertThat(t.getRetry().getMaxAttempts()).isEqualTo(5);
              assertThat(t.getRetry().getInitialBackoff()).isEqualTo(seconds(2));

              String own =
                  tb.submit(
                          tb.spec(queue, "ok")
                              .setKey(key + "-own")
                              .setRetry(RetryPolicy.newBuilder().setMaxAttempts(2).setInitialBackoff(seconds(0)))
                              .build())
                      .getTaskId();
              Task o = tb.admin().getTask(GetTaskRequest.newBuilder().setTaskId(own).build()).getTask();
              assertThat(o.getMaxAttempts()).isEqualTo(2);
              assertThat(o.getRetry().getInitialBackoff()).isEqualTo(seconds(0));
              assertThat(o.getRetry().getMaxBackoff()).isEqualTo(seconds(60));

              String other = tb.submit("no-handler-" + UUID.randomUUID().toString().substring(0, 8), "x").getTaskId();
              Task n = tb.admin().getTask(GetTaskRequest.newBuilder().setTaskId(other).build()).getTask();
              assertThat(n.getMaxAttempts()).as("a queue without handler here: the broker's default").isEqualTo(3);
            });
  }

  /** Two slots of its own; each call waits until two run at once. */
  static class Pairs {
    final AtomicInteger running = new AtomicInteger();
    final AtomicInteger most = new AtomicInteger();
    final CyclicBarrier pair = new CyclicBarrier(2);

    @TaskHandler(queue = "thumbs-own-slots", concurrency = 2)
    public void make(String image) throws Exception {
      int now = running.incrementAndGet();
      most.accumulateAndGet(now, Math::max);
      try {
        pair.await(20, TimeUnit.SECONDS);
      } finally {
        running.decrementAndGet();
      }
    }
  }

  static class Mail {
    @TaskHandler(queue = "mail-shared")
    public void send(String to) {}
  }

  @Test
  void aHandlersConcurrencyIsAWorkerOfItsOwn() {
    runner
        .withBean(Pairs.class)
        .withBean(Mail.class)
        .withPropertyValues("taskbroker.workers.main.concurrency=8")
        .run(
            ctx -> {
              assertThat(ctx).hasNotFailed();
              var workers = ctx.getBean(TaskbrokerWorkers.class).workers();
              assertThat(workers).containsOnlyKeys("main", "main/thumbs-own-slots");
              assertThat(workers.get("main").queues()).containsExactly("mail-shared");
              assertThat(workers.get("main/thumbs-own-slots").queues()).containsExactly("thumbs-own-slots");
            });
  }

  @Test
  void aHandlersConcurrencyBoundsItsTasksOnTheLiveBroker() {
    String queue = "thumbs-own-slots";
    runner
        .withBean(Pairs.class)
        .withBean(Mail.class)
        .withPropertyValues(
            "taskbroker.address=" + liveBroker(),
            "taskbroker.workers.main.concurrency=8",
            "taskbroker.workers.main.poll-wait=1s",
            "taskbroker.workers.main.stop-timeout=2s")
        .run(
            ctx -> {
              Taskbroker tb = ctx.getBean(Taskbroker.class);
              // One Submit: all six are ready at once, so a worker with free slots leases them all.
              List<dev.taskbroker.v1.TaskSpec> specs = new ArrayList<>();
              for (int i = 0; i < 6; i++) {
                specs.add(tb.spec(queue, "img-" + i).build());
              }
              List<String> ids = tb.submitAll(specs).stream().map(dev.taskbroker.v1.SubmitResult::getTaskId).toList();
              for (Task t : tb.waitForAll(ids, Duration.ofSeconds(40))) {
                assertThat(t.getState()).isEqualTo(TaskState.TASK_STATE_SUCCEEDED);
              }
              Pairs p = ctx.getBean(Pairs.class);
              assertThat(p.most.get()).as("two slots of its own, though the worker has eight").isEqualTo(2);
              Worker own = ctx.getBean(TaskbrokerWorkers.class).workers().get("main/" + queue);
              assertThat(own.isRunning()).isTrue();
            });
  }

  static class Configured {
    @TaskHandler(queue = "${app.queue}", backoff = "${app.backoff:3s}", maxBackoff = "${app.max-backoff}")
    public void handle(String s) {}
  }

  @Test
  void placeholdersInTheAttributesResolveAgainstTheProperties() {
    runner
        .withBean(Configured.class)
        .withPropertyValues("app.queue=resolved-queue", "app.max-backoff=90s", "taskbroker.workers-enabled=false")
        .run(
            ctx -> {
              TaskHandlerMethods.Handler h = ctx.getBean(TaskHandlerMethods.class).handler("resolved-queue");
              assertThat(h).as("the handler under its resolved queue").isNotNull();
              assertThat(h.retry().getInitialBackoff()).isEqualTo(seconds(3));
              assertThat(h.retry().getMaxBackoff()).isEqualTo(seconds(90));
            });
    runner
        .withBean(Configured.class)
        .run(
            ctx ->
                assertThat(org.springframework.core.NestedExceptionUtils.getMostSpecificCause(ctx.getStartupFailure()))
                    .hasMessageContaining("Configured.handle: queue: Could not resolve placeholder 'app.queue'"));
  }

  static class BadBackoff {
    @TaskHandler(queue = "q", backoff = "soon")
    public void handle(String s) {}
  }

  static class BadConcurrency {
    @TaskHandler(queue = "q", concurrency = 300)
    public void handle(String s) {}
  }

  static class BadMultiplier {
    @TaskHandler(queue = "q", backoffMultiplier = 0.5)
    public void handle(String s) {}
  }

  @Test
  void anAttributeOutOfRangeFailsTheStartNamingTheMethod() {
    runner
        .withBean(BadBackoff.class)
        .run(
            ctx ->
                assertThat(org.springframework.core.NestedExceptionUtils.getMostSpecificCause(ctx.getStartupFailure()))
                    .hasMessageContaining("BadBackoff.handle: backoff \"soon\" is not a duration"));
    runner
        .withBean(BadConcurrency.class)
        .run(
            ctx ->
                assertThat(org.springframework.core.NestedExceptionUtils.getMostSpecificCause(ctx.getStartupFailure()))
                    .hasMessageContaining("BadConcurrency.handle: concurrency must be 1 to 256"));
    runner
        .withBean(BadMultiplier.class)
        .run(
            ctx ->
                assertThat(org.springframework.core.NestedExceptionUtils.getMostSpecificCause(ctx.getStartupFailure()))
                    .hasMessageContaining("BadMultiplier.handle: backoffMultiplier must be at least 1"));
  }
}
