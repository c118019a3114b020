// The conformance case trace_propagation, for the Go client: README.md beside this file says what
// it does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

func init() { register("trace_propagation", traceContextPropagates) }

func traceContextPropagates(ctx context.Context, e *env, q string) error {
	tid, _ := trace.TraceIDFromHex(traceID)
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	id, err := submit(trace.ContextWithRemoteSpanContext(ctx, sc), e, &pb.TaskSpec{Queue: q})
	if err != nil {
		return err
	}
	task, err := getTask(ctx, e, id)
	if err != nil {
		return err
	}
	if tp := task.GetMetadata()["traceparent"]; tp != traceParent {
		return fmt.Errorf("metadata traceparent %q, want %q", tp, traceParent)
	}
	seen := make(chan string, 1)
	w, err := newWorker(e, q, worker.Config{}, func(hctx context.Context, _ *worker.Task) ([]byte, error) {
		seen <- trace.SpanContextFromContext(hctx).TraceID().String()
		return nil, nil
	})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { stop(); <-done }()
	select {
	case got := <-seen:
		if got != traceID {
			return fmt.Errorf("handler saw trace id %s, want %s", got, traceID)
		}
		return nil
	case <-time.After(20 * time.Second):
		return errors.New("the handler never ran")
	}
}
