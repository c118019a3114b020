package dev.taskbroker.client;

import java.time.Duration;
import java.util.List;

/** A wait ({@link Taskbroker#waitFor}) ran out of time; the tasks carry on. */
public final class WaitTimeoutException extends TaskbrokerException {
  private static final long serialVersionUID = 1L;

  private final transient List<String> taskIds;

  public WaitTimeoutException(List<String> taskIds, Duration waited) {
    super(
        taskIds.size()
            + " task(s) not finished after "
            + waited
            + ": "
            + String.join(", ", taskIds.subList(0, Math.min(5, taskIds.size()))));
    this.taskIds = List.copyOf(taskIds);
  }

  /** The tasks not finished yet. */
  public List<String> taskIds() {
    return taskIds;
  }
}
