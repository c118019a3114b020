package taskbroker

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/taskbroker/taskbroker/clients/go/internal/msgconv"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// TraceParent is the task metadata key (and gRPC header) of the W3C trace context.
const TraceParent = "traceparent"

// w3c is the W3C Trace Context propagator; used directly, so no global propagator needs to be
// installed (docs/client-spec.md, point 7).
var w3c = propagation.TraceContext{}

// InjectTrace writes the traceparent of ctx's span into each task's metadata, unless the task
// has one. Without a valid span context in ctx it writes nothing.
func InjectTrace(ctx context.Context, tasks ...*pb.TaskSpec) {
	carrier := propagation.MapCarrier{}
	w3c.Inject(ctx, carrier)
	tp := carrier.Get(TraceParent)
	if tp == "" {
		return
	}
	for _, t := range tasks {
		if _, ok := t.GetMetadata()[TraceParent]; ok {
			continue
		}
		if t.Metadata == nil {
			t.Metadata = map[string]string{}
		}
		t.Metadata[TraceParent] = tp
	}
}

// ExtractTrace returns ctx carrying the remote span context of a task's traceparent, so a
// handler's spans join the producer's trace. ctx is returned as is without one.
func ExtractTrace(ctx context.Context, md map[string]string) context.Context {
	if _, ok := md[TraceParent]; !ok {
		return ctx
	}
	return w3c.Extract(ctx, propagation.MapCarrier(md))
}

// traceUnary puts the caller's trace context into each call's headers; a Submit not sent by
// Submit (which makes its own) runs in a send span whose context goes into each task's
// metadata.
func traceUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if sub, ok := req.(*pb.SubmitRequest); ok && ctx.Value(sendKey{}) == nil {
		ctx, send := startSend(ctx, sub.GetTasks())
		err := invokeTraced(ctx, method, req, reply, cc, invoker, opts...)
		resp, _ := reply.(*pb.SubmitResponse)
		send.end(resp.GetResults(), err)
		return err
	}
	return invokeTraced(ctx, method, req, reply, cc, invoker, opts...)
}

func invokeTraced(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	carrier := propagation.MapCarrier{}
	w3c.Inject(ctx, carrier)
	for k, v := range carrier {
		ctx = metadata.AppendToOutgoingContext(ctx, k, v)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// Spans and instruments after the OpenTelemetry messaging semantic conventions
// (docs/client-spec.md, point 7), from the global TracerProvider and MeterProvider
// (otel.SetTracerProvider, otel.SetMeterProvider): without an SDK they record nothing and only
// the W3C trace context travels.

// InstrumentationName is the tracer and meter the client's spans and instruments come from.
const InstrumentationName = "taskbroker"

type sendKey struct{}

// sendSpan is the send span of one Submit call; End it with the call's outcome.
type sendSpan struct {
	span  trace.Span
	ctx   context.Context
	tasks []*pb.TaskSpec
}

// startSend starts the `send {queue}` span (kind PRODUCER) of a Submit of tasks and writes its
// context into each task's metadata as the creation context, unless the caller set a
// traceparent there: that one is kept and the span links to it. A traceparent equal to ctx's
// own (InjectTrace with the same ctx) counts as unset. Calls made with the returned context
// carry the span in their headers and make no second send span.
func startSend(ctx context.Context, tasks []*pb.TaskSpec) (context.Context, *sendSpan) {
	ambient := traceparentOf(ctx)
	queue := queueOf(tasks)
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", msgconv.System),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.operation.name", "submit"),
	}
	name := "send"
	if queue != "" {
		name += " " + queue
		attrs = append(attrs, attribute.String("messaging.destination.name", queue))
	}
	if len(tasks) > 1 {
		attrs = append(attrs, attribute.Int("messaging.batch.message_count", len(tasks)))
	}
	var links []trace.Link
	for _, t := range tasks {
		if tp := t.GetMetadata()[TraceParent]; tp != "" && tp != ambient {
			sc := trace.SpanContextFromContext(w3c.Extract(context.Background(), propagation.MapCarrier{TraceParent: tp}))
			if sc.IsValid() {
				links = append(links, trace.Link{SpanContext: sc})
			}
		}
	}
	ctx, span := otel.Tracer(InstrumentationName).Start(ctx, name,
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...), trace.WithLinks(links...))
	if own := traceparentOf(ctx); own != "" {
		for _, t := range tasks {
			if tp, ok := t.GetMetadata()[TraceParent]; ok && tp != ambient {
				continue
			}
			if t.Metadata == nil {
				t.Metadata = map[string]string{}
			}
			t.Metadata[TraceParent] = own
		}
	}
	return context.WithValue(ctx, sendKey{}, true), &sendSpan{span: span, ctx: ctx, tasks: tasks}
}

// end ends the span: messaging.message.id for a single task's result, or status ERROR with
// err's message and error.type; and counts the tasks in messaging.client.sent.messages.
func (s *sendSpan) end(results []*pb.SubmitResult, err error) {
	if err != nil {
		msgconv.FailSpan(s.span, err)
	} else if len(results) == 1 && len(s.tasks) == 1 {
		s.span.SetAttributes(attribute.String("messaging.message.id", results[0].GetTaskId()))
	}
	s.span.End()
	counts := map[string]int64{}
	for _, t := range s.tasks {
		counts[t.GetQueue()]++
	}
	sent := sentCounter()
	for queue, n := range counts {
		sent.Add(s.ctx, n, metric.WithAttributes(msgconv.Attributes(queue, "submit", err)...))
	}
}

var sentOnce = sync.OnceValue(func() metric.Int64Counter {
	// The global meter delegates to a provider set later, so it is made once.
	c, err := otel.Meter(InstrumentationName).Int64Counter("messaging.client.sent.messages",
		metric.WithUnit("{message}"), metric.WithDescription("Tasks sent in Submit calls, by queue."))
	if err != nil {
		otel.Handle(err)
	}
	return c
})

func sentCounter() metric.Int64Counter { return sentOnce() }

func traceparentOf(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	w3c.Inject(ctx, carrier)
	return carrier.Get(TraceParent)
}

// queueOf is the queue every task names, or "" when they name several.
func queueOf(tasks []*pb.TaskSpec) string {
	if len(tasks) == 0 {
		return ""
	}
	q := tasks[0].GetQueue()
	for _, t := range tasks[1:] {
		if t.GetQueue() != q {
			return ""
		}
	}
	return q
}
