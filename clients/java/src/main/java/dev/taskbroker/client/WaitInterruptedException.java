package dev.taskbroker.client;

import java.util.List;

/**
 * The thread waiting in {@link Taskbroker#waitFor}, {@link Taskbroker#waitForAll} or {@link
 * Taskbroker#submitAndWait} was interrupted. The thread's interrupt flag is set again before this
 * is thrown (so a caller's later blocking call still sees the interrupt), the cause is the {@link
 * InterruptedException}, and the tasks carry on (a submitted task stays submitted).
 */
public final class WaitInterruptedException extends TaskbrokerException {
  private static final long serialVersionUID = 1L;

  private final transient List<String> taskIds;

  WaitInterruptedException(List<String> taskIds, InterruptedException cause) {
    super(
        "interrupted while waiting for "
            + taskIds.size()
            + " task(s): "
            + String.join(", ", taskIds.subList(0, Math.min(5, taskIds.size()))),
        cause);
    this.taskIds = List.copyOf(taskIds);
  }

  /** The tasks waited for. */
  public List<String> taskIds() {
    return taskIds;
  }
}
