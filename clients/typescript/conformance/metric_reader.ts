/**
 * Reads the worker's metrics through the real OpenTelemetry metrics SDK: a MeterProvider with a
 * manual reader (collect() on demand), handed to the Worker as its `meterProvider`.
 */
import { DataPointType, MeterProvider, MetricReader, type ResourceMetrics } from "@opentelemetry/sdk-metrics";

/** A reader that exports nothing by itself: the test collects when it wants to look. */
class ManualReader extends MetricReader {
  protected override async onForceFlush(): Promise<void> {}
  protected override async onShutdown(): Promise<void> {}
}

export class Metrics {
  readonly reader = new ManualReader();
  readonly provider = new MeterProvider({ readers: [this.reader] });

  /** The sum of counter `name` over the points whose attributes include `attrs`. */
  async sum(name: string, attrs: Record<string, string> = {}): Promise<number> {
    const { resourceMetrics } = await this.reader.collect();
    return total(resourceMetrics, name, attrs);
  }

  /** How many values histogram `name` recorded on the points whose attributes include `attrs`. */
  async count(name: string, attrs: Record<string, string> = {}): Promise<number> {
    const { resourceMetrics } = await this.reader.collect();
    return total(resourceMetrics, name, attrs);
  }
}

function total(rm: ResourceMetrics, name: string, attrs: Record<string, string>): number {
  let n = 0;
  for (const scope of rm.scopeMetrics) {
    if (scope.scope.name !== "taskbroker") continue;
    for (const metric of scope.metrics) {
      if (metric.descriptor.name !== name) continue;
      for (const point of metric.dataPoints) {
        if (!Object.entries(attrs).every(([k, v]) => point.attributes[k] === v)) continue;
        n += metric.dataPointType === DataPointType.HISTOGRAM ? (point.value as { count: number }).count : (point.value as number);
      }
    }
  }
  return n;
}
