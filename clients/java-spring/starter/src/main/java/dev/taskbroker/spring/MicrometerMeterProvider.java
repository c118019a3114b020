package dev.taskbroker.spring;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tag;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.metrics.DoubleCounterBuilder;
import io.opentelemetry.api.metrics.DoubleGaugeBuilder;
import io.opentelemetry.api.metrics.DoubleHistogram;
import io.opentelemetry.api.metrics.DoubleHistogramBuilder;
import io.opentelemetry.api.metrics.LongCounter;
import io.opentelemetry.api.metrics.LongCounterBuilder;
import io.opentelemetry.api.metrics.LongHistogramBuilder;
import io.opentelemetry.api.metrics.LongUpDownCounterBuilder;
import io.opentelemetry.api.metrics.Meter;
import io.opentelemetry.api.metrics.MeterBuilder;
import io.opentelemetry.api.metrics.MeterProvider;
import io.opentelemetry.api.metrics.ObservableLongCounter;
import io.opentelemetry.api.metrics.ObservableLongMeasurement;
import io.opentelemetry.context.Context;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;

/**
 * The OpenTelemetry metrics API the Java client's worker records through, recorded into a
 * Micrometer {@link MeterRegistry}: every worker metric (task counts and durations, lost leases,
 * settle retries and calls) reaches the application's registry under the same name, its
 * attributes as tags.
 *
 * <p>Counters become Micrometer counters; a histogram in seconds ({@code unit "s"}) becomes a
 * {@link Timer}, any other a {@link DistributionSummary}. The instruments the worker does not use
 * (up-down counters, gauges, observable counters, double counters, long histograms) are the
 * OpenTelemetry no-op ones.
 */
public final class MicrometerMeterProvider implements MeterProvider {
  private final MeterRegistry registry;

  public MicrometerMeterProvider(MeterRegistry registry) {
    this.registry = registry;
  }

  @Override
  public MeterBuilder meterBuilder(String instrumentationScopeName) {
    Meter noop = MeterProvider.noop().get(instrumentationScopeName);
    Meter meter = new BridgeMeter(registry, noop);
    return new MeterBuilder() {
      @Override
      public MeterBuilder setSchemaUrl(String schemaUrl) {
        return this;
      }

      @Override
      public MeterBuilder setInstrumentationVersion(String version) {
        return this;
      }

      @Override
      public Meter build() {
        return meter;
      }
    };
  }

  static Tags tags(Attributes attributes) {
    List<Tag> tags = new ArrayList<>(attributes.size());
    attributes.forEach((k, v) -> tags.add(Tag.of(k.getKey(), String.valueOf(v))));
    return Tags.of(tags);
  }

  private record BridgeMeter(MeterRegistry registry, Meter noop) implements Meter {
    @Override
    public LongCounterBuilder counterBuilder(String name) {
      return new CounterBuilder(registry, noop, name);
    }

    @Override
    public LongUpDownCounterBuilder upDownCounterBuilder(String name) {
      return noop.upDownCounterBuilder(name);
    }

    @Override
    public DoubleHistogramBuilder histogramBuilder(String name) {
      return new HistogramBuilder(registry, noop, name);
    }

    @Override
    public DoubleGaugeBuilder gaugeBuilder(String name) {
      return noop.gaugeBuilder(name);
    }
  }

  private static final class CounterBuilder implements LongCounterBuilder {
    private final MeterRegistry registry;
    private final Meter noop;
    private final String name;
    private String description;
    private String unit;

    CounterBuilder(MeterRegistry registry, Meter noop, String name) {
      this.registry = registry;
      this.noop = noop;
      this.name = name;
    }

    @Override
    public LongCounterBuilder setDescription(String description) {
      this.description = description;
      return this;
    }

    @Override
    public LongCounterBuilder setUnit(String unit) {
      this.unit = unit;
      return this;
    }

    @Override
    public DoubleCounterBuilder ofDoubles() {
      return noop.counterBuilder(name).ofDoubles();
    }

    @Override
    public LongCounter build() {
      String d = description;
      String u = unit;
      return new LongCounter() {
        @Override
        public void add(long value) {
          add(value, Attributes.empty());
        }

        @Override
        public void add(long value, Attributes attributes) {
          Counter.builder(name)
              .description(d)
              .baseUnit(u)
              .tags(tags(attributes))
              .register(registry)
              .increment(value);
        }

        @Override
        public void add(long value, Attributes attributes, Context context) {
          add(value, attributes);
        }
      };
    }

    @Override
    public ObservableLongCounter buildWithCallback(Consumer<ObservableLongMeasurement> callback) {
      return noop.counterBuilder(name).buildWithCallback(callback);
    }
  }

  private static final class HistogramBuilder implements DoubleHistogramBuilder {
    private final MeterRegistry registry;
    private final Meter noop;
    private final String name;
    private String description;
    private String unit;

    HistogramBuilder(MeterRegistry registry, Meter noop, String name) {
      this.registry = registry;
      this.noop = noop;
      this.name = name;
    }

    @Override
    public DoubleHistogramBuilder setDescription(String description) {
      this.description = description;
      return this;
    }

    @Override
    public DoubleHistogramBuilder setUnit(String unit) {
      this.unit = unit;
      return this;
    }

    @Override
    public LongHistogramBuilder ofLongs() {
      return noop.histogramBuilder(name).ofLongs();
    }

    @Override
    public DoubleHistogram build() {
      String d = description;
      String u = unit;
      boolean seconds = "s".equals(u);
      return new DoubleHistogram() {
        @Override
        public void record(double value) {
          record(value, Attributes.empty());
        }

        @Override
        public void record(double value, Attributes attributes) {
          Tags t = tags(attributes);
          if (seconds) {
            Timer.builder(name)
                .description(d)
                .tags(t)
                .register(registry)
                .record(Duration.ofNanos((long) (value * 1e9)));
          } else {
            DistributionSummary.builder(name)
                .description(d)
                .baseUnit(u)
                .tags(t)
                .register(registry)
                .record(value);
          }
        }

        @Override
        public void record(double value, Attributes attributes, Context context) {
          record(value, attributes);
        }
      };
    }
  }
}
