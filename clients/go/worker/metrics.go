package worker

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/taskbroker/taskbroker/clients/go/internal/msgconv"
)

// MeterName is the OpenTelemetry meter the worker's instruments come from.
const MeterName = "taskbroker"

// The outcomes of taskbroker.worker.tasks and taskbroker.worker.task.duration.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
	OutcomeLeaseLost = "lease_lost"
	OutcomeCancelled = "cancelled"
)

// metrics are the worker's OpenTelemetry instruments (docs/client-spec.md): the API only, so
// they record nothing until the application installs an SDK MeterProvider (Config.MeterProvider
// or otel.SetMeterProvider).
type metrics struct {
	tasks         metric.Int64Counter
	duration      metric.Float64Histogram
	leasesLost    metric.Int64Counter
	settleRetries metric.Int64Counter
	settleCalls   metric.Int64Counter
	// The OpenTelemetry messaging conventions' consumer instruments.
	consumedMessages metric.Int64Counter
	processDuration  metric.Float64Histogram
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(MeterName)
	var ms metrics
	var err error
	if ms.tasks, err = m.Int64Counter("taskbroker.worker.tasks",
		metric.WithDescription("Attempts this worker ran, by queue and outcome (succeeded, failed, lease_lost, cancelled).")); err != nil {
		return nil, err
	}
	if ms.duration, err = m.Float64Histogram("taskbroker.worker.task.duration", metric.WithUnit("s"),
		metric.WithDescription("How long handlers ran, by queue and outcome."),
		// Seconds, from a quick task to an hour-long one (the SDK's default buckets are for ms).
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)); err != nil {
		return nil, err
	}
	if ms.leasesLost, err = m.Int64Counter("taskbroker.worker.leases.lost",
		metric.WithDescription("Leases this worker lost (the broker's answer or the local clock), by queue.")); err != nil {
		return nil, err
	}
	if ms.settleRetries, err = m.Int64Counter("taskbroker.worker.settle.retries",
		metric.WithDescription("Complete and Fail calls tried again after UNAVAILABLE or DEADLINE_EXCEEDED, by queue.")); err != nil {
		return nil, err
	}
	if ms.settleCalls, err = m.Int64Counter("taskbroker.worker.settle.calls",
		metric.WithDescription("Settle calls sent, by rpc (Complete, CompleteMany, Fail).")); err != nil {
		return nil, err
	}
	if ms.consumedMessages, err = m.Int64Counter("messaging.client.consumed.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Leased tasks given to a handler (messaging.system, messaging.destination.name, messaging.operation.name).")); err != nil {
		return nil, err
	}
	if ms.processDuration, err = m.Float64Histogram("messaging.process.duration", metric.WithUnit("s"),
		metric.WithDescription("How long handlers ran (the messaging attributes, and error.type when the handler failed)."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)); err != nil {
		return nil, err
	}
	return &ms, nil
}

func (m *metrics) consumed(ctx context.Context, queue string) {
	m.consumedMessages.Add(ctx, 1, metric.WithAttributes(msgconv.Attributes(queue, "process", nil)...))
}

func (m *metrics) processed(ctx context.Context, queue string, seconds float64, err error) {
	m.processDuration.Record(ctx, seconds, metric.WithAttributes(msgconv.Attributes(queue, "process", err)...))
}

func (m *metrics) task(queue, outcome string, seconds float64) {
	attrs := metric.WithAttributes(attribute.String("queue", queue), attribute.String("outcome", outcome))
	m.tasks.Add(context.Background(), 1, attrs)
	m.duration.Record(context.Background(), seconds, attrs)
}

func (m *metrics) leaseLost(queue string) {
	m.leasesLost.Add(context.Background(), 1, metric.WithAttributes(attribute.String("queue", queue)))
}

func (m *metrics) settleRetry(queue string) {
	m.settleRetries.Add(context.Background(), 1, metric.WithAttributes(attribute.String("queue", queue)))
}

func (m *metrics) settleCall(rpc string) {
	m.settleCalls.Add(context.Background(), 1, metric.WithAttributes(attribute.String("rpc", rpc)))
}
