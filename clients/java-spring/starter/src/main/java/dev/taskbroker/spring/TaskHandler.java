package dev.taskbroker.spring;

import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * Marks a method of a Spring bean as the handler of a queue's tasks.
 *
 * <pre>{@code
 * @Component
 * class Mailer {
 *   @TaskHandler(queue = "emails")
 *   public Sent handle(Email email, TaskContext ctx) { ... }
 * }
 * }</pre>
 *
 * <p>Parameters, in any order: at most one payload parameter, decoded from the task's payload by
 * the client's serializer (JSON by default) into its declared type, generic types included
 * ({@code List<Email>}; {@code byte[]} takes the bytes as they are), and optionally a {@link
 * dev.taskbroker.client.TaskContext}. The return value is encoded as the task's result by the
 * same serializer ({@code void} or null: no result; {@code byte[]} as it is). Throw to fail the
 * attempt: {@link dev.taskbroker.client.PermanentException} without retry, anything else under the
 * task's retry policy. One handler per queue in the application.
 */
@Target(ElementType.METHOD)
@Retention(RetentionPolicy.RUNTIME)
@Documented
public @interface TaskHandler {
  /** The queue whose tasks this method handles. */
  String queue();
}
