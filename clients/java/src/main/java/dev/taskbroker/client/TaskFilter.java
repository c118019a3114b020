package dev.taskbroker.client;

import dev.taskbroker.v1.ListTasksRequest;
import java.time.Instant;

/**
 * Which tasks {@link Taskbroker#listTasks} returns; {@link #all()} (nothing set) means all of them.
 *
 * <pre>{@code
 * tb.listTasks(TaskFilter.all().queue("emails").states(TaskInfo.State.DEAD))
 * }</pre>
 */
public final class TaskFilter {
  private final ListTasksRequest.Builder req = ListTasksRequest.newBuilder();

  private TaskFilter() {}

  /** No condition: every task. */
  public static TaskFilter all() {
    return new TaskFilter();
  }

  public TaskFilter queue(String queue) {
    req.setQueue(queue);
    return this;
  }

  /** Only tasks in one of these states. */
  public TaskFilter states(TaskInfo.State... states) {
    for (TaskInfo.State s : states) {
      req.addStates(s.proto());
    }
    return this;
  }

  public TaskFilter key(String key) {
    req.setKey(key);
    return this;
  }

  public TaskFilter workerId(String workerId) {
    req.setWorkerId(workerId);
    return this;
  }

  public TaskFilter fanoutGroup(String group) {
    req.setFanoutGroup(group);
    return this;
  }

  public TaskFilter scheduleId(String scheduleId) {
    req.setScheduleId(scheduleId);
    return this;
  }

  public TaskFilter createdAfter(Instant t) {
    req.setCreatedAfter(ProtoTime.timestamp(t));
    return this;
  }

  public TaskFilter createdBefore(Instant t) {
    req.setCreatedBefore(ProtoTime.timestamp(t));
    return this;
  }

  /** Only tasks whose target names this worker. */
  public TaskFilter targetWorker(String workerId) {
    req.setTargetWorkerId(workerId);
    return this;
  }

  /** Only tasks whose target labels include this pair; call again to require more (at most 32). */
  public TaskFilter targetLabel(String key, String value) {
    req.putTargetLabels(key, value);
    return this;
  }

  /** Only tasks whose metadata has this key (with any value). */
  public TaskFilter metadataKey(String key) {
    req.setMetadataKey(key);
    return this;
  }

  /**
   * Only tasks whose metadata maps {@code key} to {@code value}. A value without a key (an empty
   * {@code key}) is refused: INVALID_ARGUMENT.
   */
  public TaskFilter metadata(String key, String value) {
    req.setMetadataKey(key).setMetadataValue(value);
    return this;
  }

  /** Tasks per call (the broker's default when not set); every page is read. */
  public TaskFilter pageSize(int n) {
    req.setPageSize(n);
    return this;
  }

  ListTasksRequest.Builder request() {
    return req.clone();
  }
}
