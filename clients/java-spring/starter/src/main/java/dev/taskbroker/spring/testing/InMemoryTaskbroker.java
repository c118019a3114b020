package dev.taskbroker.spring.testing;

import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Inherited;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import org.springframework.test.context.TestPropertySource;

/**
 * Runs a Spring test's application context on the starter's in-memory broker instead of a real
 * one ({@code taskbroker.in-memory=true}): the {@code Taskbroker} bean submits to an {@link
 * dev.taskbroker.client.testing.InMemoryBroker} (a bean too, to read its tasks and outcomes)
 * that runs the application's {@code @TaskHandler} methods, with its middleware and serializer,
 * within the Submit; no worker starts and nothing connects anywhere.
 *
 * <pre>{@code
 * @SpringBootTest
 * @InMemoryTaskbroker
 * class SignupTest {
 *   @Autowired SignupService signup;   // submits through the Taskbroker bean
 *   @Autowired InMemoryBroker broker;
 *
 *   @Test
 *   void sendsTheWelcomeEmail() {
 *     signup.register("ada@example.com");
 *     assertThat(broker.tasks()).singleElement()
 *         .extracting(Task::getState).isEqualTo(TaskState.TASK_STATE_SUCCEEDED);
 *   }
 * }
 * }</pre>
 */
@Target(ElementType.TYPE)
@Retention(RetentionPolicy.RUNTIME)
@Documented
@Inherited
@TestPropertySource(properties = "taskbroker.in-memory=true")
public @interface InMemoryTaskbroker {}
