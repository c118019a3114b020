package dev.taskbroker.client;

import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.metrics.DoubleHistogram;
import io.opentelemetry.api.metrics.LongCounter;
import io.opentelemetry.api.metrics.Meter;
import io.opentelemetry.api.metrics.MeterProvider;
import java.time.Duration;

/**
 * The worker's instruments, from the meter {@code taskbroker} of the OpenTelemetry API (inert
 * until the application installs an SDK): docs/client-spec.md, client-side metrics. Beside its
 * own, the consumer instruments of the OpenTelemetry messaging conventions ({@code
 * messaging.client.consumed.messages}, {@code messaging.process.duration}; Submit counts {@code
 * messaging.client.sent.messages}, see {@link Tracing}).
 */
final class WorkerMetrics {
  static final String METER = "taskbroker";
  private static final AttributeKey<String> QUEUE = AttributeKey.stringKey("queue");
  private static final AttributeKey<String> OUTCOME = AttributeKey.stringKey("outcome");
  private static final AttributeKey<String> RPC = AttributeKey.stringKey("rpc");

  /** How one attempt ended for this worker. */
  enum Outcome {
    SUCCEEDED("succeeded"),
    FAILED("failed"),
    LEASE_LOST("lease_lost"),
    CANCELLED("cancelled");

    final String label;

    Outcome(String label) {
      this.label = label;
    }
  }

  private final LongCounter tasks;
  private final DoubleHistogram duration;
  private final LongCounter leasesLost;
  private final LongCounter settleRetries;
  private final LongCounter settleCalls;
  private final LongCounter consumed;
  private final DoubleHistogram process;

  WorkerMetrics(MeterProvider provider) {
    Meter meter = provider.get(METER);
    tasks =
        meter
            .counterBuilder("taskbroker.worker.tasks")
            .setDescription("Attempts this worker finished, by queue and outcome")
            .build();
    duration =
        meter
            .histogramBuilder("taskbroker.worker.task.duration")
            .setDescription("How long handlers ran, by queue and outcome")
            .setUnit("s")
            .build();
    leasesLost =
        meter
            .counterBuilder("taskbroker.worker.leases.lost")
            .setDescription("Leases this worker lost while it held them")
            .build();
    settleRetries =
        meter
            .counterBuilder("taskbroker.worker.settle.retries")
            .setDescription("Complete or Fail calls sent again after the broker was unreachable")
            .build();
    settleCalls =
        meter
            .counterBuilder("taskbroker.worker.settle.calls")
            .setDescription("Settle calls sent, by RPC (Complete, CompleteMany, Fail)")
            .build();
    // The OpenTelemetry messaging conventions' consumer instruments.
    consumed =
        meter
            .counterBuilder("messaging.client.consumed.messages")
            .setUnit("{message}")
            .setDescription("Leased tasks given to a handler")
            .build();
    process =
        meter
            .histogramBuilder("messaging.process.duration")
            .setUnit("s")
            .setDescription("How long handlers ran (messaging conventions)")
            .build();
  }

  void task(String queue, Outcome outcome, Duration ran) {
    Attributes a = Attributes.of(QUEUE, queue, OUTCOME, outcome.label);
    tasks.add(1, a);
    duration.record(ran.toNanos() / 1e9, a);
  }

  void leaseLost(String queue) {
    leasesLost.add(1, Attributes.of(QUEUE, queue));
  }

  void settleRetry(String queue) {
    settleRetries.add(1, Attributes.of(QUEUE, queue));
  }

  /** One settle call sent: {@code rpc} is Complete, CompleteMany or Fail. */
  void settleCall(String rpc) {
    settleCalls.add(1, Attributes.of(RPC, rpc));
  }

  /** A leased task given to its handler. */
  void consumed(String queue) {
    consumed.add(1, Tracing.messagingAttributes(queue, "process", null));
  }

  /** A handler's run; {@code error} when it threw (its {@code error.type}). */
  void processed(String queue, double seconds, Throwable error) {
    process.record(seconds, Tracing.messagingAttributes(queue, "process", error));
  }
}
