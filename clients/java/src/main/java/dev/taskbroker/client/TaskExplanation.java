package dev.taskbroker.client;

import dev.taskbroker.v1.ExplainTaskResponse;
import dev.taskbroker.v1.GateKind;
import dev.taskbroker.v1.LeasePath;
import java.time.Instant;
import java.util.List;

/**
 * What holds a task ({@link Taskbroker#explainTask}). {@link #gates()} is empty when the task is
 * not waiting (leased or finished); {@link #leasePath()} is {@code "PLAIN"}, {@code "ROUTED"} or
 * {@code "GATED"} for a waiting task, {@code ""} otherwise.
 */
public record TaskExplanation(
    String taskId, TaskInfo.State state, List<Gate> gates, String leasePath, ExplainTaskResponse proto) {

  /**
   * One reason a waiting task is not leased now.
   *
   * @param kind the GateKind's name without its prefix ({@code "RUN_AT_IN_FUTURE"},
   *     {@code "QUEUE_PAUSED"}, ...; {@code "NONE"}: nothing holds it)
   * @param until when it opens, when known; null otherwise
   * @param bucket BUCKET_CONCURRENCY_FULL, BUCKET_RATE_LIMITED, COOLDOWN of a bucket: the bucket
   * @param concurrencyKey COOLDOWN of a concurrency key: the key
   */
  public record Gate(
      String kind,
      String detail,
      Instant until,
      List<String> holderTaskIds,
      long ahead,
      String bucket,
      String concurrencyKey) {}

  /** The TaskExplanation of an ExplainTask answer. */
  public static TaskExplanation of(ExplainTaskResponse r) {
    List<Gate> gates =
        r.getGatesList().stream()
            .map(
                g ->
                    new Gate(
                        name(g.getKind() == GateKind.UNRECOGNIZED ? "" : g.getKind().name(), "GATE_KIND_"),
                        g.getDetail(),
                        g.hasUntil() ? ProtoTime.instant(g.getUntil()) : null,
                        List.copyOf(g.getHolderTaskIdsList()),
                        g.getAhead(),
                        g.getBucket(),
                        g.getConcurrencyKey()))
            .toList();
    String path =
        r.getLeasePath() == LeasePath.LEASE_PATH_UNSPECIFIED || r.getLeasePath() == LeasePath.UNRECOGNIZED
            ? ""
            : name(r.getLeasePath().name(), "LEASE_PATH_");
    return new TaskExplanation(r.getTaskId(), TaskInfo.State.of(r.getState()), gates, path, r);
  }

  private static String name(String full, String prefix) {
    return full.startsWith(prefix) ? full.substring(prefix.length()) : full;
  }
}
