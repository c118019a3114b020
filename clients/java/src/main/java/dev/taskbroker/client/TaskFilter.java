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

  /** Tasks per call (the broker's default when not set); every page is read. */
  public TaskFilter pageSize(int n) {
    req.setPageSize(n);
    return this;
  }

  ListTasksRequest.Builder request() {
    return req.clone();
  }
}
