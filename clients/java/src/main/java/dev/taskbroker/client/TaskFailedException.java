package dev.taskbroker.client;

import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskState;

/**
 * A waited-for task ended DEAD or CANCELLED ({@link Taskbroker#waitFor}, {@link
 * Taskbroker#submitAndWait}, {@link Taskbroker#result}): its id, its final state and its last
 * error (the message of its last failed attempt, or empty).
 *
 * <pre>{@code
 * try {
 *   Receipt r = tb.result(tb.submitAndWait(spec, Duration.ofMinutes(1)), Receipt.class);
 * } catch (TaskFailedException e) {
 *   log.warn(e.taskId() + " ended " + e.state() + ": " + e.lastError());
 * }
 * }</pre>
 */
public final class TaskFailedException extends TaskbrokerException {
  private static final long serialVersionUID = 1L;

  private final String taskId;
  private final TaskState state;
  private final String lastError;
  private final transient Task task;

  public TaskFailedException(Task task) {
    super(
        "task "
            + task.getId()
            + " ended "
            + stateName(task.getState())
            + (task.getLastError().isEmpty() ? "" : ": " + task.getLastError()));
    this.taskId = task.getId();
    this.state = task.getState();
    this.lastError = task.getLastError();
    this.task = task;
  }

  /** The task's id. */
  public String taskId() {
    return taskId;
  }

  /** {@code TASK_STATE_DEAD} or {@code TASK_STATE_CANCELLED}. */
  public TaskState state() {
    return state;
  }

  /** The message of the task's last failed attempt, or empty. */
  public String lastError() {
    return lastError;
  }

  /** The task as it was read. */
  public Task task() {
    return task;
  }

  /** The task itself, unless it ended DEAD or CANCELLED: then this exception is thrown. */
  static Task throwIfFailed(Task task) {
    if (task.getState() == TaskState.TASK_STATE_DEAD
        || task.getState() == TaskState.TASK_STATE_CANCELLED) {
      throw new TaskFailedException(task);
    }
    return task;
  }

  static String stateName(TaskState state) {
    return state.name().replaceFirst("^TASK_STATE_", "");
  }
}
