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
 *
 * <p>The other attributes are this queue's defaults, each unset unless given:
 *
 * <ul>
 *   <li>{@link #maxAttempts}, {@link #backoff}, {@link #backoffMultiplier}, {@link #maxBackoff}:
 *       the retry policy of the tasks this application's client submits to the queue, field by
 *       field where the submitted spec leaves the field unset. A spec's own {@code retry} wins,
 *       then these, then the broker's settings of the queue ({@code [queues.NAME] retry}), then
 *       its {@code [retry]}. A retry policy lives with the task on the broker, so tasks another
 *       service submits to the queue do not get these: set the queue's retry on the broker when
 *       every producer must.
 *   <li>{@link #nonRetryable}: exceptions that fail the attempt for good (the task goes DEAD at
 *       once, as {@link dev.taskbroker.client.PermanentException} does), whoever submitted it.
 *   <li>{@link #concurrency}: this queue's own slots; its tasks then run in a worker of their own
 *       (the same settings as the worker listing the queue, that many slots) instead of sharing
 *       the worker's {@code concurrency}.
 * </ul>
 *
 * <p>{@code queue}, {@code backoff} and {@code maxBackoff} may hold {@code ${...}} placeholders,
 * resolved against the application's properties ({@code queue = "${app.mail-queue:emails}"}).
 */
@Target(ElementType.METHOD)
@Retention(RetentionPolicy.RUNTIME)
@Documented
public @interface TaskHandler {
  /** The queue whose tasks this method handles. */
  String queue();

  /** Total attempts allowed, counting the first, at least 1; 0: unset. */
  int maxAttempts() default 0;

  /**
   * Backoff before the second attempt ({@code 10s}, {@code 500ms}, {@code PT1M}; {@code 0s}
   * retries at once); empty: unset.
   */
  String backoff() default "";

  /** Factor applied to the backoff after each failure, at least 1; 0: unset. */
  double backoffMultiplier() default 0;

  /** Upper bound of the backoff, as {@link #backoff}; empty: unset. */
  String maxBackoff() default "";

  /**
   * Exceptions (and their subclasses) that fail the attempt without retry; checked against the
   * exception the method throws and its causes.
   */
  Class<? extends Throwable>[] nonRetryable() default {};

  /** This queue's own slots, 1 to 256, in a worker of its own; 0: the worker's shared slots. */
  int concurrency() default 0;
}
