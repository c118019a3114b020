package dev.taskbroker.client;

/**
 * Does the work of one task. Return the result (or null) to complete it; throw to fail it:
 * {@link PermanentException} without retry, anything else under the task's retry policy.
 * Long work should check {@link TaskContext#isCancelled()} and stop when it turns true.
 */
@FunctionalInterface
public interface TaskHandler {
  byte[] handle(TaskContext ctx) throws Exception;
}
