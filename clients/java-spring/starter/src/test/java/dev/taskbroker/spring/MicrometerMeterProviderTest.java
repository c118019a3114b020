package dev.taskbroker.spring;

import static org.assertj.core.api.Assertions.assertThat;

import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.metrics.Meter;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** OpenTelemetry instruments recorded through the bridge land in a Micrometer registry. */
class MicrometerMeterProviderTest {
  private final SimpleMeterRegistry registry = new SimpleMeterRegistry();
  private final Meter meter = new MicrometerMeterProvider(registry).get("taskbroker");
  private final Attributes emailsOk =
      Attributes.of(AttributeKey.stringKey("queue"), "emails", AttributeKey.stringKey("outcome"), "succeeded");

  @Test
  void countersAddByTheirAttributes() {
    var tasks = meter.counterBuilder("taskbroker.worker.tasks").setDescription("d").build();
    tasks.add(1, emailsOk);
    tasks.add(2, emailsOk);
    tasks.add(1, Attributes.of(AttributeKey.stringKey("queue"), "other", AttributeKey.stringKey("outcome"), "failed"));
    assertThat(registry.get("taskbroker.worker.tasks").tags("queue", "emails", "outcome", "succeeded").counter().count())
        .isEqualTo(3.0);
    assertThat(registry.get("taskbroker.worker.tasks").tags("queue", "other").counter().count()).isEqualTo(1.0);
  }

  @Test
  void aHistogramInSecondsIsATimer() {
    var duration = meter.histogramBuilder("taskbroker.worker.task.duration").setUnit("s").build();
    duration.record(0.25, emailsOk);
    duration.record(0.5, emailsOk);
    var timer = registry.get("taskbroker.worker.task.duration").tags("queue", "emails").timer();
    assertThat(timer.count()).isEqualTo(2);
    assertThat(timer.totalTime(TimeUnit.MILLISECONDS)).isEqualTo(750.0);
  }

  @Test
  void anotherHistogramIsADistributionSummary() {
    var sizes = meter.histogramBuilder("payload.size").setUnit("By").build();
    sizes.record(100, Attributes.empty());
    assertThat(registry.get("payload.size").summary().totalAmount()).isEqualTo(100.0);
  }
}
