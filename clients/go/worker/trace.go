package worker

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	"github.com/taskbroker/taskbroker/clients/go/internal/msgconv"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// processRun is a handler's run in its `process {queue}` span (docs/client-spec.md, point 7):
// kind CONSUMER, from the global TracerProvider (otel.SetTracerProvider), whose parent is the
// task's stored traceparent (the creation context) and which links to that same context, as
// the OpenTelemetry messaging conventions recommend. Without an SDK the span records nothing
// and the handler runs in the stored context alone.
type processRun struct {
	span    trace.Span
	ctx     context.Context
	queue   string
	metrics *metrics
}

// startProcess starts the span of lt's handler run under parent and counts the task in
// messaging.client.consumed.messages.
func (w *Worker) startProcess(parent context.Context, lt *pb.LeasedTask) (context.Context, processRun) {
	parent = taskbroker.ExtractTrace(parent, lt.GetMetadata())
	var links []trace.Link
	if sc := trace.SpanContextFromContext(parent); sc.IsValid() && sc.IsRemote() {
		links = append(links, trace.Link{SpanContext: sc})
	}
	ctx, span := otel.Tracer(taskbroker.InstrumentationName).Start(parent, "process "+lt.GetQueue(),
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(links...),
		trace.WithAttributes(
			attribute.String("messaging.system", msgconv.System),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.operation.name", "process"),
			attribute.String("messaging.destination.name", lt.GetQueue()),
			attribute.String("messaging.message.id", lt.GetTaskId()),
			attribute.Int64("taskbroker.attempt", int64(lt.GetAttempt())),
		))
	w.metrics.consumed(ctx, lt.GetQueue())
	return ctx, processRun{span: span, ctx: ctx, queue: lt.GetQueue(), metrics: w.metrics}
}

// end ends the span after the handler returned err (status ERROR with its message and
// error.type when set) and records the run in messaging.process.duration.
func (p processRun) end(seconds float64, err error) {
	if err != nil {
		msgconv.FailSpan(p.span, err)
	}
	p.span.End()
	p.metrics.processed(p.ctx, p.queue, seconds, err)
}
