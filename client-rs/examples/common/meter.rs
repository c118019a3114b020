//! A meter whose readings the scenario can take: the OpenTelemetry SDK's in-memory
//! exporter behind a provider of its own, so each case counts only its worker.

use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

pub struct Readings {
    exporter: InMemoryMetricExporter,
    provider: SdkMeterProvider,
    meter: Meter,
}

impl Readings {
    pub fn new() -> Self {
        let exporter = InMemoryMetricExporter::default();
        let provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(exporter.clone()).build())
            .build();
        let meter = provider.meter("taskbroker");
        Readings {
            exporter,
            provider,
            meter,
        }
    }

    pub fn meter(&self) -> Meter {
        self.meter.clone()
    }

    /// The sum of counter `name` over the data points whose attributes include every
    /// `(key, value)` of `with`, as of now (sums are cumulative: the last export).
    pub fn count(&self, name: &str, with: &[(&str, &str)]) -> u64 {
        self.exporter.reset();
        if self.provider.force_flush().is_err() {
            return 0;
        }
        let Ok(exports) = self.exporter.get_finished_metrics() else {
            return 0;
        };
        let Some(last) = exports.last() else {
            return 0;
        };
        let mut total = 0;
        for scope in last.scope_metrics() {
            for m in scope.metrics().filter(|m| m.name() == name) {
                if let AggregatedMetrics::U64(MetricData::Sum(sum)) = m.data() {
                    for p in sum.data_points() {
                        let matches = with.iter().all(|(k, v)| {
                            p.attributes()
                                .any(|kv| kv.key.as_str() == *k && kv.value.as_str() == *v)
                        });
                        if matches {
                            total += p.value();
                        }
                    }
                }
            }
        }
        total
    }
}
