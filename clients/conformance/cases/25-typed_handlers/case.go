// The conformance case typed_handlers, for the Go client: README.md beside this file says what it
// does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

func init() { register("typed_handlers", typedHandlers) }

type typedPayload struct {
	To string `json:"to,omitempty"`
	N  int    `json:"n"`
}

type typedResult struct {
	OK bool `json:"ok"`
	N  int  `json:"n"`
}

// typedHandlers: one worker, a typed handler on each of two queues and one middleware; typed
// submits and results, the tasks counter read from an OpenTelemetry ManualReader, and a
// payload that does not decode ending DEAD.
func typedHandlers(ctx context.Context, e *env, q string) error {
	suffix := q[strings.LastIndex(q, ".")+1:]
	qa, qb := "conf.go.typed_a."+suffix, "conf.go.typed_b."+suffix
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	type seen struct{ queue, outcome string }
	var mu sync.Mutex
	var saw []seen
	middleware := func(next worker.Handler) worker.Handler {
		return func(ctx context.Context, t *worker.Task) ([]byte, error) {
			result, err := next(ctx, t)
			outcome := "success"
			if err != nil {
				outcome = "error"
			}
			mu.Lock()
			saw = append(saw, seen{t.GetQueue(), outcome})
			mu.Unlock()
			return result, err
		}
	}
	var problems []string
	check := func(want typedPayload) worker.TypedFunc[typedPayload, typedResult] {
		return func(ctx context.Context, t *worker.Task, p typedPayload) (typedResult, error) {
			if p != want {
				mu.Lock()
				problems = append(problems, fmt.Sprintf("%s got %+v, want %+v", t.GetQueue(), p, want))
				mu.Unlock()
			}
			return typedResult{OK: true, N: p.N}, nil
		}
	}
	mux := worker.NewMux()
	mux.Handle(qa, worker.HandleJSON(check(typedPayload{To: "a@example.com", N: 1})))
	mux.Handle(qb, worker.HandleJSON(check(typedPayload{N: 2})))
	w, err := mux.Worker(e.conn, worker.Config{WorkerID: workerID, PollWait: time.Second,
		Middleware: []worker.Middleware{middleware}, MeterProvider: provider})
	if err != nil {
		return err
	}

	a, err := taskbroker.SubmitJSON(ctx, e.broker, qa, typedPayload{To: "a@example.com", N: 1})
	if err != nil {
		return fmt.Errorf("SubmitJSON A: %w", err)
	}
	b, err := taskbroker.SubmitJSON(ctx, e.broker, qb, typedPayload{N: 2})
	if err != nil {
		return fmt.Errorf("SubmitJSON B: %w", err)
	}
	raw, err := e.broker.Submit(ctx, &pb.SubmitRequest{Tasks: []*pb.TaskSpec{{Queue: qa, Payload: []byte("not json")}}})
	if err != nil {
		return fmt.Errorf("Submit: %w", err)
	}
	bad := raw.GetResults()[0].GetTaskId()

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	tasks, waitErr := taskbroker.WaitAll(ctx, e.admin, []string{a.GetTaskId(), b.GetTaskId(), bad})
	stop()
	if err := <-done; err != nil {
		return fmt.Errorf("Run: %w", err)
	}
	if waitErr != nil {
		return waitErr
	}
	for i, n := range []int{1, 2} {
		t := tasks[i]
		if t.GetState() != pb.TaskState_TASK_STATE_SUCCEEDED {
			return fmt.Errorf("task %s is %v (%q), want SUCCEEDED", t.GetQueue(), t.GetState(), t.GetLastError())
		}
		r, err := taskbroker.ResultJSON[typedResult](t)
		if err != nil {
			return err
		}
		if r != (typedResult{OK: true, N: n}) {
			return fmt.Errorf("task %s result %+v, want {OK:true N:%d}", t.GetQueue(), r, n)
		}
	}
	if t := tasks[2]; t.GetState() != pb.TaskState_TASK_STATE_DEAD || !strings.Contains(t.GetLastError(), "payload is not a valid typedPayload") {
		return fmt.Errorf("the undecodable task is %v, last error %q; want DEAD naming the type", t.GetState(), t.GetLastError())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		return fmt.Errorf("handlers: %s", strings.Join(problems, "; "))
	}
	for _, want := range []seen{{qa, "success"}, {qb, "success"}, {qa, "error"}} {
		n := 0
		for _, s := range saw {
			if s == want {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("the middleware saw %+v, want one %+v", saw, want)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return err
	}
	for _, queue := range []string{qa, qb} {
		if n := counter(rm, "taskbroker.worker.tasks", attribute.String("queue", queue), attribute.String("outcome", "succeeded")); n != 1 {
			return fmt.Errorf("taskbroker.worker.tasks{queue=%s, outcome=succeeded} = %d, want 1", queue, n)
		}
	}
	return nil
}

// counter sums the points of the counter name (meter "taskbroker") carrying every attribute.
func counter(rm metricdata.ResourceMetrics, name string, attrs ...attribute.KeyValue) int64 {
	var total int64
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != worker.MeterName {
			continue
		}
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != name || !ok {
				continue
			}
		point:
			for _, dp := range sum.DataPoints {
				for _, a := range attrs {
					if v, ok := dp.Attributes.Value(a.Key); !ok || v != a.Value {
						continue point
					}
				}
				total += dp.Value
			}
		}
	}
	return total
}
