package dev.taskbroker.spring;

import static org.assertj.core.api.Assertions.assertThat;

import dev.taskbroker.client.PermanentException;
import dev.taskbroker.client.TaskContext;
import dev.taskbroker.client.testing.InMemoryBroker;
import dev.taskbroker.client.testing.Outcome;
import dev.taskbroker.client.testing.TestTaskContext;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskState;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import org.junit.jupiter.api.Test;

/** Annotated handlers run by the client's testing package: no broker, no application context. */
class TestingWithoutBrokerTest {
  record Email(String to) {}

  record Sent(String to, int attempt) {}

  static class Mailer {
    @TaskHandler(queue = "emails")
    public Sent send(Email email, TaskContext ctx) throws Exception {
      if (email.to().isEmpty()) {
        throw new PermanentException("no address");
      }
      ctx.checkpoint("rendered".getBytes(StandardCharsets.UTF_8));
      return new Sent(email.to(), ctx.attempt());
    }
  }

  private static TaskHandlerMethods.Handler mailer() {
    TaskHandlerMethods methods = new TaskHandlerMethods();
    methods.postProcessAfterInitialization(new Mailer(), "mailer");
    return methods.handlers().get(0);
  }

  @Test
  void anAnnotatedHandlerRunsOnATestTaskContext() {
    TestTaskContext t = TestTaskContext.of("emails", new Email("ada@example.com"));
    Outcome out = t.run(mailer().registration());
    assertThat(out.succeeded()).isTrue();
    assertThat(out.result(Sent.class)).isEqualTo(new Sent("ada@example.com", 1));
    assertThat(t.checkpoints()).hasSize(1);
    assertThat(TestTaskContext.of("emails", new Email("")).run(mailer().registration()).permanent()).isTrue();
  }

  @Test
  void aSubmitRunsTheAnnotatedHandlerOnTheInMemoryBroker() {
    InMemoryBroker tb = new InMemoryBroker().register(mailer().registration());
    Task task = tb.submitAndWait(tb.spec("emails", new Email("ada@example.com")).build(), Duration.ofSeconds(1));
    assertThat(task.getState()).isEqualTo(TaskState.TASK_STATE_SUCCEEDED);
    assertThat(tb.result(task, Sent.class)).isEqualTo(new Sent("ada@example.com", 1));
  }
}
