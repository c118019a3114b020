package taskbroker

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

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

// traceUnary puts the caller's trace context into each call's headers and, on Submit, into
// each task's metadata.
func traceUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if sub, ok := req.(*pb.SubmitRequest); ok {
		InjectTrace(ctx, sub.GetTasks()...)
	}
	carrier := propagation.MapCarrier{}
	w3c.Inject(ctx, carrier)
	for k, v := range carrier {
		ctx = metadata.AppendToOutgoingContext(ctx, k, v)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}
