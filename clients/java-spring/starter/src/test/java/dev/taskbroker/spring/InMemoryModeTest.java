package dev.taskbroker.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.taskbroker.client.Middleware;
import dev.taskbroker.client.PermanentException;
import dev.taskbroker.client.TaskFailedException;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.WaitTimeoutException;
import dev.taskbroker.client.testing.InMemoryBroker;
import dev.taskbroker.v1.ListTasksRequest;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskState;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.autoconfigure.jdbc.DataSourceAutoConfiguration;
import org.springframework.boot.autoconfigure.jdbc.DataSourceTransactionManagerAutoConfiguration;
import org.springframework.boot.autoconfigure.transaction.TransactionAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.transaction.support.TransactionTemplate;

/**
 * taskbroker.in-memory=true: the application's own Taskbroker bean submits to the in-process
 * fake, which runs the @TaskHandler at once; no worker, and the address (nothing listens there)
 * is never dialled.
 */
class InMemoryModeTest {
  private final ApplicationContextRunner runner =
      new ApplicationContextRunner()
          .withConfiguration(AutoConfigurations.of(TaskbrokerAutoConfiguration.class))
          .withPropertyValues("taskbroker.address=127.0.0.1:1", "taskbroker.in-memory=true");

  record Email(String to) {}

  record Sent(String to, int attempt) {}

  static class Mailer {
    @TaskHandler(queue = "emails")
    public Sent send(Email email, dev.taskbroker.client.TaskContext ctx) {
      if (email.to().isEmpty()) {
        throw new PermanentException("no address");
      }
      return new Sent(email.to(), ctx.attempt());
    }
  }

  /** Application code: it knows only the Taskbroker bean. */
  static class Signup {
    private final Taskbroker taskbroker;

    Signup(Taskbroker taskbroker) {
      this.taskbroker = taskbroker;
    }

    String register(String email) {
      return taskbroker.submit("emails", new Email(email)).getTaskId();
    }
  }

  @Test
  void aSubmitThroughTheClientBeanRunsTheHandler() {
    runner
        .withBean(Mailer.class)
        .withBean(Signup.class)
        .run(
            ctx -> {
              assertThat(ctx).hasNotFailed().hasSingleBean(InMemoryBroker.class);
              assertThat(ctx.getBean(TaskbrokerWorkers.class).workers()).as("no worker").isEmpty();
              String id = ctx.getBean(Signup.class).register("ada@example.com");

              InMemoryBroker fake = ctx.getBean(InMemoryBroker.class);
              assertThat(fake.getTask(id).getState()).isEqualTo(TaskState.TASK_STATE_SUCCEEDED);
              Taskbroker tb = ctx.getBean(Taskbroker.class);
              Task done = tb.waitFor(id, Duration.ofSeconds(5));
              assertThat(tb.result(done, Sent.class)).isEqualTo(new Sent("ada@example.com", 1));
              assertThat(tb.admin().listTasks(ListTasksRequest.newBuilder().setQueue("emails").build()).getTasksList())
                  .extracting(Task::getId)
                  .containsExactly(id);
            });
  }

  /** Submits while the context starts, before the handlers are known. */
  static class Eager {
    final String id;

    Eager(Taskbroker taskbroker) {
      id = taskbroker.submit("emails", new Email("early@example.com")).getTaskId();
    }
  }

  @Test
  void aTaskSubmittedWhileTheContextStartsRunsOnceTheHandlersAreKnown() {
    runner
        .withBean(Eager.class)
        .withBean(Mailer.class)
        .run(
            ctx -> {
              assertThat(ctx).hasNotFailed();
              String id = ctx.getBean(Eager.class).id;
              assertThat(ctx.getBean(InMemoryBroker.class).getTask(id).getState()).isEqualTo(TaskState.TASK_STATE_SUCCEEDED);
            });
  }

  @Test
  void aFailedTaskFailsTheWaitAndAQueueWithoutHandlerWaitsUntilTheTimeout() {
    runner
        .withBean(Mailer.class)
        .run(
            ctx -> {
              Taskbroker tb = ctx.getBean(Taskbroker.class);
              assertThatThrownBy(() -> tb.submitAndWait(tb.spec("emails", new Email("")).build(), Duration.ofSeconds(5)))
                  .isInstanceOf(TaskFailedException.class)
                  .hasMessageContaining("no address");
              String id = tb.submit("nobody-handles-this", new Email("x")).getTaskId();
              assertThat(ctx.getBean(InMemoryBroker.class).getTask(id).getState()).isEqualTo(TaskState.TASK_STATE_READY);
              assertThatThrownBy(() -> tb.waitFor(id, Duration.ofMillis(200))).isInstanceOf(WaitTimeoutException.class);
            });
  }

  @Test
  void middlewareBeansRunAroundTheHandlers() {
    List<String> seen = new CopyOnWriteArrayList<>();
    runner
        .withBean(Mailer.class)
        .withBean(
            Middleware.class,
            () ->
                (task, next) -> {
                  seen.add(task.queue());
                  return next.proceed();
                })
        .run(
            ctx -> {
              ctx.getBean(Taskbroker.class).submit("emails", new Email("ada@example.com"));
              assertThat(seen).containsExactly("emails");
            });
  }

  @Test
  void afterCommitSubmitsToTheFakeOnlyOnCommit() {
    runner
        .withConfiguration(
            AutoConfigurations.of(
                DataSourceAutoConfiguration.class,
                DataSourceTransactionManagerAutoConfiguration.class,
                TransactionAutoConfiguration.class))
        .withBean(Mailer.class)
        .run(
            ctx -> {
              AfterCommitSubmitter submitter = ctx.getBean(AfterCommitSubmitter.class);
              TransactionTemplate tx = ctx.getBean(TransactionTemplate.class);
              InMemoryBroker fake = ctx.getBean(InMemoryBroker.class);
              tx.executeWithoutResult(
                  status -> {
                    submitter.submitAfterCommit("emails", new Email("rolled@example.com"));
                    status.setRollbackOnly();
                  });
              assertThat(fake.tasks()).isEmpty();
              AfterCommitSubmitter.Submission s =
                  tx.execute(status -> submitter.submitAfterCommit("emails", new Email("ada@example.com")));
              assertThat(s.deferred()).isTrue();
              assertThat(fake.tasks()).extracting(Task::getId).containsExactly(s.result().join().getTaskId());
              assertThat(fake.tasks().get(0).getState()).isEqualTo(TaskState.TASK_STATE_SUCCEEDED);
            });
  }
}
