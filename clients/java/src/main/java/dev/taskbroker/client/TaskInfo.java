package dev.taskbroker.client;

import dev.taskbroker.v1.CancelReason;
import dev.taskbroker.v1.Task;
import java.time.Instant;
import java.util.Map;

/**
 * A task as the broker has it, as {@link Taskbroker#getTask}, {@link Taskbroker#listTasks},
 * {@link Taskbroker#cancelTask} and {@link Taskbroker#requeueTask} answer it: its state by name
 * ({@link State#SUCCEEDED}), times as {@link Instant}s (null when not set), and the message it came
 * from in {@link #proto()} for the fields not copied here.
 *
 * @param bucket the limit bucket it counts against, as submitted ({@code ""}: its queue's, if any)
 * @param cancelReason {@code "OPERATOR"} or {@code "DEPENDENCY_FAILED"} for a CANCELLED task,
 *     {@code ""} otherwise
 */
public record TaskInfo(
    String id,
    String queue,
    String key,
    String bucket,
    State state,
    int attempt,
    int maxAttempts,
    int priority,
    byte[] payload,
    byte[] result,
    String lastError,
    Map<String, String> metadata,
    Instant runAt,
    Instant deadline,
    Instant createdAt,
    Instant updatedAt,
    Instant finishedAt,
    String leasedBy,
    Instant leaseExpiresAt,
    boolean cancelRequested,
    String cancelReason,
    Task proto) {

  /** A task's state; {@code toString()} is its name. */
  public enum State {
    SCHEDULED,
    READY,
    LEASED,
    SUCCEEDED,
    DEAD,
    CANCELLED,
    BLOCKED;

    /** The state of a protobuf value; {@link TaskbrokerException} for one this client does not know. */
    public static State of(dev.taskbroker.v1.TaskState s) {
      String name = s.name().substring("TASK_STATE_".length());
      try {
        return valueOf(name);
      } catch (IllegalArgumentException e) {
        throw new TaskbrokerException("the broker sent an unknown task state " + s, e);
      }
    }

    /** The protobuf value of this state. */
    public dev.taskbroker.v1.TaskState proto() {
      return dev.taskbroker.v1.TaskState.valueOf("TASK_STATE_" + name());
    }
  }

  /** The TaskInfo of a task message. */
  public static TaskInfo of(Task t) {
    return new TaskInfo(
        t.getId(),
        t.getQueue(),
        t.getKey(),
        t.getBucket(),
        State.of(t.getState()),
        t.getAttempt(),
        t.getMaxAttempts(),
        t.getPriority(),
        t.getPayload().toByteArray(),
        t.getResult().toByteArray(),
        t.getLastError(),
        Map.copyOf(t.getMetadataMap()),
        t.hasRunAt() ? ProtoTime.instant(t.getRunAt()) : null,
        t.hasDeadline() ? ProtoTime.instant(t.getDeadline()) : null,
        t.hasCreatedAt() ? ProtoTime.instant(t.getCreatedAt()) : null,
        t.hasUpdatedAt() ? ProtoTime.instant(t.getUpdatedAt()) : null,
        t.hasFinishedAt() ? ProtoTime.instant(t.getFinishedAt()) : null,
        t.getLeasedBy(),
        t.hasLeaseExpiresAt() ? ProtoTime.instant(t.getLeaseExpiresAt()) : null,
        t.getCancelRequested(),
        t.getCancelReason() == CancelReason.CANCEL_REASON_UNSPECIFIED
                || t.getCancelReason() == CancelReason.UNRECOGNIZED
            ? ""
            : t.getCancelReason().name().substring("CANCEL_REASON_".length()),
        t);
  }

  @Override
  public String toString() {
    return "TaskInfo[" + id + " " + queue + " " + state + ", attempt " + attempt + "/" + maxAttempts + "]";
  }
}
