package dev.taskbroker.client;

/**
 * Does the work of one task whose payload the worker decoded into a {@code T} (with the worker's
 * {@link Serializer}, JSON by default). The returned value (null: no result) is encoded as the
 * task's result; throw to fail the attempt, as with {@link TaskHandler}.
 *
 * <pre>{@code
 * record Email(String to, String subject) {}
 * record Sent(String messageId) {}
 * Worker.builder(tb).handle("emails", Email.class, (task, email) -> new Sent(mailer.send(email)))
 * }</pre>
 */
@FunctionalInterface
public interface TypedHandler<T, R> {
  R handle(TaskContext task, T payload) throws Exception;
}
