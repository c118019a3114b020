package dev.taskbroker.conformance;

import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskState;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.opentelemetry.sdk.metrics.data.LongPointData;
import io.opentelemetry.sdk.metrics.data.MetricData;
import io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The {@code typed_handlers} case of clients/conformance/cases/ (the code of each is its folder's
 * Case.java; this class holds what it shares with the harness): one worker, a typed handler on each of two
 * queues and one middleware; typed submit, typed result, metrics read through the OpenTelemetry
 * SDK's in-memory reader, and a payload that does not decode.
 */
final class TypedCases {
  private TypedCases() {}

  public record Email(String to, int n) {}

  public record Count(int n) {}

  public record Ok(boolean ok, int n) {}

  static void check(boolean ok, String reason) {
    if (!ok) {
      throw new IllegalStateException(reason);
    }
  }

  /** The value of {@code taskbroker.worker.tasks} for one queue and outcome (0 when absent). */
  static long tasks(InMemoryMetricReader reader, String queue, String outcome) {
    long sum = 0;
    for (MetricData m : reader.collectAllMetrics()) {
      if (!m.getName().equals("taskbroker.worker.tasks")) {
        continue;
      }
      for (LongPointData p : m.getLongSumData().getPoints()) {
        if (queue.equals(p.getAttributes().get(AttributeKey.stringKey("queue")))
            && outcome.equals(p.getAttributes().get(AttributeKey.stringKey("outcome")))) {
          sum += p.getValue();
        }
      }
    }
    return sum;
  }

}
