package dev.taskbroker.spring;

import static org.assertj.core.api.Assertions.assertThat;

import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.testing.InMemoryBroker;
import dev.taskbroker.spring.testing.InMemoryTaskbroker;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskState;
import java.time.Duration;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.autoconfigure.ImportAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;

/** A Spring test as an application writes one: @SpringBootTest with @InMemoryTaskbroker, no broker. */
@SpringBootTest(
    classes = {InMemoryTaskbrokerAnnotationTest.Greeter.class},
    properties = "taskbroker.address=127.0.0.1:1")
@ImportAutoConfiguration(TaskbrokerAutoConfiguration.class)
@InMemoryTaskbroker
class InMemoryTaskbrokerAnnotationTest {
  static class Greeter {
    @TaskHandler(queue = "greetings")
    public String greet(String name) {
      return "hello " + name;
    }
  }

  @Autowired Taskbroker taskbroker;
  @Autowired InMemoryBroker broker;
  @Autowired TaskbrokerWorkers workers;

  @Test
  void theApplicationsClientRunsTheHandlerInMemory() {
    Task t = taskbroker.submitAndWait(taskbroker.spec("greetings", "ada").build(), Duration.ofSeconds(5));
    assertThat(taskbroker.result(t, String.class)).isEqualTo("hello ada");
    assertThat(broker.tasks()).singleElement().extracting(Task::getState).isEqualTo(TaskState.TASK_STATE_SUCCEEDED);
    assertThat(workers.workers()).isEmpty();
  }
}
