package worker_test

// The send and process spans and the messaging instruments (the OpenTelemetry messaging
// conventions, docs/client-spec.md point 7), read from the SDK's in-memory span exporter and a
// ManualReader installed as the global providers, against the live broker.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

var (
	spansOnce sync.Once
	exporter  = tracetest.NewInMemoryExporter()
	reader    = sdkmetric.NewManualReader()
)

// installSDK makes the in-memory exporter and the reader the global providers' (once: the
// client reads the globals). Each test filters by its own queue.
func installSDK() {
	spansOnce.Do(func() {
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter)))
		otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	})
}

func spanNamed(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range exporter.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %q, want 1", len(found), name)
	}
	return found[0]
}

func attrs(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}

func traceparentOf(sc trace.SpanContext) string {
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}

// messagingPoints are the data points of the instrument name for queue, as attribute maps
// with the point's value (a sum, or a histogram's count) under "value".
func messagingPoints(t *testing.T, name, queue string) []map[string]string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name != name {
				continue
			}
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					m := attrs(dp.Attributes.ToSlice())
					m["value"] = fmt.Sprint(dp.Value)
					out = append(out, m)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					m := attrs(dp.Attributes.ToSlice())
					m["value"] = fmt.Sprint(dp.Count)
					out = append(out, m)
				}
			}
		}
	}
	var mine []map[string]string
	for _, m := range out {
		if m["messaging.destination.name"] == queue {
			mine = append(mine, m)
		}
	}
	return mine
}

func TestSubmitSendsInAProducerSpanAndTheHandlerRunsInALinkedConsumerSpan(t *testing.T) {
	f := newFixture(t)
	installSDK()
	ctx, request := otel.Tracer("test").Start(context.Background(), "request")
	results, err := taskbroker.Submit(ctx, f.broker, &pb.TaskSpec{Queue: f.queue, Payload: []byte("x")})
	request.End()
	if err != nil {
		t.Fatal(err)
	}
	id := results[0].GetTaskId()

	send := spanNamed(t, "send "+f.queue)
	if send.SpanKind != trace.SpanKindProducer {
		t.Errorf("send span kind %v, want producer", send.SpanKind)
	}
	if send.Parent.SpanID() != request.SpanContext().SpanID() {
		t.Errorf("send span's parent %v, want the request span %v", send.Parent.SpanID(), request.SpanContext().SpanID())
	}
	want := map[string]string{
		"messaging.system":           "taskbroker",
		"messaging.operation.type":   "send",
		"messaging.operation.name":   "submit",
		"messaging.destination.name": f.queue,
		"messaging.message.id":       id,
	}
	if got := attrs(send.Attributes); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("send attributes %v, want %v", got, want)
	}
	// The send span's context is the task's creation context.
	got, err := f.admin.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	if tp := got.GetTask().GetMetadata()["traceparent"]; tp != traceparentOf(send.SpanContext) {
		t.Errorf("stored traceparent %q, want the send span's %q", tp, traceparentOf(send.SpanContext))
	}

	inHandler := make(chan trace.SpanContext, 1)
	stop := f.start(t, worker.Config{}, func(ctx context.Context, _ *worker.Task) ([]byte, error) {
		inHandler <- trace.SpanContextFromContext(ctx)
		return nil, worker.Permanent(errors.New("no such image"))
	})
	f.waitState(t, id, pb.TaskState_TASK_STATE_DEAD)
	stop()

	process := spanNamed(t, "process "+f.queue)
	if process.SpanKind != trace.SpanKindConsumer {
		t.Errorf("process span kind %v, want consumer", process.SpanKind)
	}
	if process.Parent.SpanID() != send.SpanContext.SpanID() || process.SpanContext.TraceID() != request.SpanContext().TraceID() {
		t.Errorf("process span's parent %v in trace %v, want the send span %v in %v",
			process.Parent.SpanID(), process.SpanContext.TraceID(), send.SpanContext.SpanID(), request.SpanContext().TraceID())
	}
	if len(process.Links) != 1 || process.Links[0].SpanContext.SpanID() != send.SpanContext.SpanID() {
		t.Errorf("process span's links %v, want one to the send span", process.Links)
	}
	if sc := <-inHandler; !sc.Equal(process.SpanContext) {
		t.Errorf("the handler ran in span %v, want the process span %v", sc.SpanID(), process.SpanContext.SpanID())
	}
	pa := attrs(process.Attributes)
	for k, v := range map[string]string{
		"messaging.system":           "taskbroker",
		"messaging.operation.type":   "process",
		"messaging.operation.name":   "process",
		"messaging.destination.name": f.queue,
		"messaging.message.id":       id,
		"error.type":                 "*worker.PermanentError",
	} {
		if pa[k] != v {
			t.Errorf("process attribute %s = %q, want %q", k, pa[k], v)
		}
	}
	if process.Status.Code != codes.Error || process.Status.Description != "no such image" {
		t.Errorf("process status %v, want Error \"no such image\"", process.Status)
	}

	if p := messagingPoints(t, "messaging.client.sent.messages", f.queue); len(p) != 1 || p[0]["value"] != "1" || p[0]["messaging.operation.name"] != "submit" {
		t.Errorf("messaging.client.sent.messages %v, want 1 for submit", p)
	}
	if p := messagingPoints(t, "messaging.client.consumed.messages", f.queue); len(p) != 1 || p[0]["value"] != "1" {
		t.Errorf("messaging.client.consumed.messages %v, want 1", p)
	}
	// The worker's instruments come from the global provider here (no Config.MeterProvider).
	if p := messagingPoints(t, "messaging.process.duration", f.queue); len(p) != 1 || p[0]["value"] != "1" ||
		p[0]["error.type"] != "*worker.PermanentError" || p[0]["messaging.operation.name"] != "process" {
		t.Errorf("messaging.process.duration %v, want one run with error.type", p)
	}
}

func TestARawBatchSubmitCountsItsTasksAndKeepsACreationContextTheCallerSet(t *testing.T) {
	f := newFixture(t)
	installSDK()
	custom := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx, request := otel.Tracer("test").Start(context.Background(), "request")
	// Through the generated stub: the connection's interceptor makes the send span.
	resp, err := f.broker.Submit(ctx, &pb.SubmitRequest{Tasks: []*pb.TaskSpec{
		{Queue: f.queue}, {Queue: f.queue}, {Queue: f.queue, Metadata: map[string]string{"traceparent": custom}},
	}})
	request.End()
	if err != nil {
		t.Fatal(err)
	}
	send := spanNamed(t, "send "+f.queue)
	a := attrs(send.Attributes)
	if a["messaging.batch.message_count"] != "3" {
		t.Errorf("messaging.batch.message_count %q, want 3", a["messaging.batch.message_count"])
	}
	if _, ok := a["messaging.message.id"]; ok {
		t.Errorf("a batch's send span has messaging.message.id %q", a["messaging.message.id"])
	}
	if len(send.Links) != 1 || send.Links[0].SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("send span's links %v, want one to the caller's creation context", send.Links)
	}
	var stored []string
	for _, r := range resp.GetResults() {
		got, err := f.admin.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: r.GetTaskId()})
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, got.GetTask().GetMetadata()["traceparent"])
	}
	own := traceparentOf(send.SpanContext)
	if fmt.Sprint(stored) != fmt.Sprint([]string{own, own, custom}) {
		t.Errorf("stored traceparents %v, want [%s %s %s]", stored, own, own, custom)
	}
	if p := messagingPoints(t, "messaging.client.sent.messages", f.queue); len(p) != 1 || p[0]["value"] != "3" {
		t.Errorf("messaging.client.sent.messages %v, want 3", p)
	}
}

func TestAHandlerThatSucceedsLeavesItsProcessSpanUnset(t *testing.T) {
	f := newFixture(t)
	installSDK()
	ids := f.submit(t, &pb.TaskSpec{Payload: []byte("x")}) // no ambient span: send starts the trace
	f.start(t, worker.Config{}, func(context.Context, *worker.Task) ([]byte, error) { return []byte("ok"), nil })
	f.waitState(t, ids[0], pb.TaskState_TASK_STATE_SUCCEEDED)
	send := spanNamed(t, "send "+f.queue)
	process := spanNamed(t, "process "+f.queue)
	if send.Parent.IsValid() {
		t.Errorf("send span has parent %v, want none", send.Parent.SpanID())
	}
	if process.Parent.SpanID() != send.SpanContext.SpanID() || len(process.Links) != 1 {
		t.Errorf("process span's parent %v and links %v, want the send span", process.Parent.SpanID(), process.Links)
	}
	if process.Status.Code != codes.Unset {
		t.Errorf("process status %v, want Unset", process.Status)
	}
	if _, ok := attrs(process.Attributes)["error.type"]; ok {
		t.Errorf("a succeeded run has error.type")
	}
	if p := messagingPoints(t, "messaging.process.duration", f.queue); len(p) != 1 || p[0]["error.type"] != "" {
		t.Errorf("messaging.process.duration %v, want one run without error.type", p)
	}
}
