package worker_test

// Typed handlers, the Mux, middleware and the OpenTelemetry instruments, against the live
// broker; the instruments are read with the OpenTelemetry SDK's ManualReader.

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

// meter is an OpenTelemetry SDK MeterProvider read on demand.
type meter struct {
	reader   *sdkmetric.ManualReader
	provider *sdkmetric.MeterProvider
}

func newMeter() *meter {
	r := sdkmetric.NewManualReader()
	return &meter{reader: r, provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))}
}

// count is the sum of the counter name's points whose attributes include every pair of attrs.
func (m *meter) count(t *testing.T, name string, attrs ...string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != worker.MeterName {
			continue
		}
		for _, mt := range sm.Metrics {
			if mt.Name != name {
				continue
			}
			sum, ok := mt.Data.(metricdata.Sum[int64])
			if !ok {
				t.Fatalf("%s is %T, want a Sum[int64]", name, mt.Data)
			}
		point:
			for _, dp := range sum.DataPoints {
				for i := 0; i+1 < len(attrs); i += 2 {
					if v, ok := dp.Attributes.Value(attribute.Key(attrs[i])); !ok || v.AsString() != attrs[i+1] {
						continue point
					}
				}
				total += dp.Value
			}
		}
	}
	return total
}

// durations is how many durations the histogram holds for queue and outcome.
func (m *meter) durations(t *testing.T, queue, outcome string) uint64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			h, ok := mt.Data.(metricdata.Histogram[float64])
			if mt.Name != "taskbroker.worker.task.duration" || !ok {
				continue
			}
			for _, dp := range h.DataPoints {
				q, _ := dp.Attributes.Value("queue")
				o, _ := dp.Attributes.Value("outcome")
				if q.AsString() == queue && o.AsString() == outcome {
					n += dp.Count
				}
			}
		}
	}
	return n
}

// runWorker runs w until the test ends.
func runWorker(t *testing.T, w *worker.Worker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

type email struct {
	To string `json:"to"`
	N  int    `json:"n"`
}

type receipt struct {
	OK bool `json:"ok"`
	N  int  `json:"n"`
}

type seen struct {
	queue, outcome string
}

func TestTypedHandlersOnTwoQueuesOfOneMux(t *testing.T) {
	f := newFixture(t)
	qa, qb := f.queue+".a", f.queue+".b"
	m := newMeter()
	var mu sync.Mutex
	var saw []seen
	observe := func(next worker.Handler) worker.Handler {
		return func(ctx context.Context, task *worker.Task) ([]byte, error) {
			result, err := next(ctx, task)
			outcome := "success"
			if err != nil {
				outcome = "error: " + err.Error()
			}
			mu.Lock()
			saw = append(saw, seen{task.GetQueue(), outcome})
			mu.Unlock()
			return result, err
		}
	}
	var got sync.Map
	mux := worker.NewMux()
	mux.Handle(qa, worker.HandleJSON(func(ctx context.Context, task *worker.Task, e email) (receipt, error) {
		got.Store(qa, e)
		return receipt{OK: true, N: e.N}, nil
	}))
	mux.Handle(qb, worker.HandleJSON(func(ctx context.Context, task *worker.Task, e email) (receipt, error) {
		got.Store(qb, e)
		return receipt{OK: true, N: e.N}, nil
	}))
	w, err := mux.Worker(f.conn, worker.Config{WorkerID: "test-go", PollWait: time.Second,
		Middleware: []worker.Middleware{observe}, MeterProvider: m.provider})
	if err != nil {
		t.Fatal(err)
	}
	if q := w.Config().Queues; len(q) != 2 || q[0] != qa || q[1] != qb {
		t.Fatalf("the worker leases from %v, want both queues of the mux", q)
	}
	ctx := context.Background()
	a, err := taskbroker.SubmitJSON(ctx, f.broker, qa, email{To: "a@example.com", N: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := taskbroker.SubmitJSON(ctx, f.broker, qb, email{N: 2},
		taskbroker.WithTask(&pb.TaskSpec{Key: "typed-b", Retry: &pb.RetryPolicy{MaxAttempts: 3}}))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := f.broker.Submit(ctx, &pb.SubmitRequest{Tasks: []*pb.TaskSpec{{Queue: qa, Payload: []byte("not json"),
		Retry: &pb.RetryPolicy{MaxAttempts: 3}}}})
	if err != nil {
		t.Fatal(err)
	}
	bad := raw.GetResults()[0].GetTaskId()
	runWorker(t, w)

	for _, c := range []struct {
		id, queue string
		want      email
	}{{a.GetTaskId(), qa, email{To: "a@example.com", N: 1}}, {b.GetTaskId(), qb, email{N: 2}}} {
		task := f.waitState(t, c.id, pb.TaskState_TASK_STATE_SUCCEEDED)
		r, err := taskbroker.ResultJSON[receipt](task)
		if err != nil || r != (receipt{OK: true, N: c.want.N}) {
			t.Errorf("%s: result %+v (%v), want {OK:true N:%d}", c.queue, r, err, c.want.N)
		}
		if e, _ := got.Load(c.queue); e != c.want {
			t.Errorf("%s: the handler got %+v, want %+v", c.queue, e, c.want)
		}
		if n := m.count(t, "taskbroker.worker.tasks", "queue", c.queue, "outcome", "succeeded"); n != 1 {
			t.Errorf("%s: taskbroker.worker.tasks{succeeded} = %d, want 1", c.queue, n)
		}
		if n := m.durations(t, c.queue, "succeeded"); n != 1 {
			t.Errorf("%s: %d durations recorded, want 1", c.queue, n)
		}
	}
	// The undecodable payload is not retried: DEAD after one attempt, saying why.
	task := f.waitState(t, bad, pb.TaskState_TASK_STATE_DEAD)
	if task.GetAttempt() != 1 || !strings.Contains(task.GetLastError(), "payload is not a valid email") ||
		!strings.Contains(task.GetLastError(), qa) {
		t.Errorf("attempt %d, last error %q; want one attempt naming the queue and the type", task.GetAttempt(), task.GetLastError())
	}
	if n := m.count(t, "taskbroker.worker.tasks", "queue", qa, "outcome", "failed"); n != 1 {
		t.Errorf("taskbroker.worker.tasks{%s, failed} = %d, want 1", qa, n)
	}
	if n := m.count(t, "taskbroker.worker.settle.calls", "rpc", "Fail"); n != 1 {
		t.Errorf("settle.calls{Fail} = %d, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	var success []string
	for _, s := range saw {
		if s.outcome == "success" {
			success = append(success, s.queue)
		}
	}
	if len(saw) != 3 || len(success) != 2 || success[0] == success[1] {
		t.Errorf("the middleware saw %+v, want both queues' tasks succeed and one failure", saw)
	}
}

func TestMiddlewareRunsFirstOutermostAndCanReplaceTheOutcome(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	var order []string
	trace := func(name string) worker.Middleware {
		return func(next worker.Handler) worker.Handler {
			return func(ctx context.Context, task *worker.Task) ([]byte, error) {
				mu.Lock()
				order = append(order, name+">")
				mu.Unlock()
				r, err := next(ctx, task)
				mu.Lock()
				order = append(order, "<"+name)
				mu.Unlock()
				return r, err
			}
		}
	}
	// Turns every failure, a panic included, into a permanent one.
	permanent := func(next worker.Handler) worker.Handler {
		return func(ctx context.Context, task *worker.Task) ([]byte, error) {
			r, err := next(ctx, task)
			if err != nil {
				return nil, worker.Permanentf("gave up: %v", err)
			}
			return r, nil
		}
	}
	ids := f.submit(t, &pb.TaskSpec{Payload: []byte("x"), Retry: &pb.RetryPolicy{MaxAttempts: 5}})
	f.start(t, worker.Config{Middleware: []worker.Middleware{trace("outer"), trace("inner"), permanent}},
		func(ctx context.Context, task *worker.Task) ([]byte, error) { panic("boom") })
	task := f.waitState(t, ids[0], pb.TaskState_TASK_STATE_DEAD)
	if task.GetAttempt() != 1 || task.GetLastError() != "gave up: handler panicked: boom" {
		t.Errorf("attempt %d, last error %q; want the middleware's permanent failure at once", task.GetAttempt(), task.GetLastError())
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(order, " "); got != "outer> inner> <inner <outer" {
		t.Errorf("middleware ran as %q, want the first registered outermost", got)
	}
}

func TestMuxRefusesQueuesItDoesNotHandle(t *testing.T) {
	mux := worker.NewMux()
	mux.Handle("a", func(context.Context, *worker.Task) ([]byte, error) { return nil, nil })
	if _, err := mux.Worker(nil, worker.Config{Queues: []string{"a", "b"}}); err == nil {
		t.Error("a Config.Queues naming a queue without a handler was accepted")
	}
	defer func() {
		if recover() == nil {
			t.Error("a second handler for one queue was accepted")
		}
	}()
	mux.Handle("a", func(context.Context, *worker.Task) ([]byte, error) { return nil, nil })
}

func TestAResultThatDoesNotEncodeFailsTheAttempt(t *testing.T) {
	f := newFixture(t)
	ids := f.submit(t, &pb.TaskSpec{Payload: []byte(`{"n": 1}`), Retry: &pb.RetryPolicy{MaxAttempts: 1}})
	f.start(t, worker.Config{}, worker.HandleJSON(func(ctx context.Context, task *worker.Task, e email) (map[string]any, error) {
		return map[string]any{"ch": make(chan int)}, nil
	}))
	task := f.waitState(t, ids[0], pb.TaskState_TASK_STATE_DEAD)
	if !strings.Contains(task.GetLastError(), "result map[string]interface {} could not be encoded: json: unsupported type: chan int") {
		t.Errorf("last error %q; want it to say the result could not be encoded and why", task.GetLastError())
	}
}

// gatedConn holds the first call to method until open is closed, then sends it on; every call
// is counted by method.
type gatedConn struct {
	grpc.ClientConnInterface
	method string
	held   chan struct{} // closed once the first call is held
	open   chan struct{}
	once   sync.Once
}

func (c *gatedConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if strings.HasSuffix(method, "/"+c.method) {
		first := false
		c.once.Do(func() { first = true })
		if first {
			close(c.held)
			<-c.open
		}
	}
	return c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
}

// waitFor waits for cond, checked each millisecond, failing after 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within 20 s", what)
		}
	}
}

// Completes that finish while one is in flight go as one CompleteMany, each with its own
// answer: a task whose lease was lost meanwhile gets LEASE_LOST, the others succeed.
func TestCompletesBehindACallInFlightGoAsOneCompleteMany(t *testing.T) {
	f := newFixture(t)
	m := newMeter()
	recs := &records{}
	conn := &gatedConn{ClientConnInterface: f.conn, method: "Complete", held: make(chan struct{}), open: make(chan struct{})}
	ids := f.submit(t, &pb.TaskSpec{Payload: []byte("1")}, &pb.TaskSpec{Payload: []byte("2")},
		&pb.TaskSpec{Payload: []byte("3")}, &pb.TaskSpec{Payload: []byte("lost")})
	started := make(chan struct{}, 4)
	first, last := make(chan struct{}), make(chan struct{})
	w, err := worker.New(conn, worker.Config{Queues: []string{f.queue}, WorkerID: "test-go", Concurrency: 4,
		PollWait: time.Second, MeterProvider: m.provider, Logger: recs.logger()},
		func(ctx context.Context, task *worker.Task) ([]byte, error) {
			started <- struct{}{}
			if string(task.GetPayload()) != "lost" {
				<-first
				return []byte("done " + string(task.GetPayload())), nil
			}
			<-last
			// Another party settles the task under this lease: the worker's Complete is late.
			if _, err := f.broker.Fail(context.Background(), &pb.FailRequest{TaskId: task.GetTaskId(),
				LeaseToken: task.GetLeaseToken(), ErrorMessage: "settled elsewhere", NonRetryable: true}); err != nil {
				return nil, err
			}
			return []byte("late"), nil
		})
	if err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	for range 4 {
		<-started
	}
	close(first)
	<-conn.held
	waitFor(t, "two Completes queued behind the one in flight", func() bool { return w.QueuedCompletions() == 2 })
	close(last)
	waitFor(t, "three Completes queued", func() bool { return w.QueuedCompletions() == 3 })
	close(conn.open)

	for i, id := range ids[:3] {
		task := f.waitState(t, id, pb.TaskState_TASK_STATE_SUCCEEDED)
		if task.GetAttempt() != 1 || string(task.GetResult()) != fmt.Sprintf("done %d", i+1) {
			t.Errorf("task %d: attempt %d, result %q", i+1, task.GetAttempt(), task.GetResult())
		}
	}
	if task := f.waitState(t, ids[3], pb.TaskState_TASK_STATE_DEAD); task.GetLastError() != "settled elsewhere" {
		t.Errorf("the lost task's last error is %q", task.GetLastError())
	}
	waitFor(t, "the lost lease counted", func() bool { return m.count(t, "taskbroker.worker.leases.lost", "queue", f.queue) == 1 })
	if c, cm := m.count(t, "taskbroker.worker.settle.calls", "rpc", "Complete"), m.count(t, "taskbroker.worker.settle.calls", "rpc", "CompleteMany"); c != 1 || cm != 1 {
		t.Errorf("settle calls: %d Complete, %d CompleteMany; want 1 and 1", c, cm)
	}
	if n := m.count(t, "taskbroker.worker.tasks", "queue", f.queue, "outcome", "succeeded"); n != 3 {
		t.Errorf("tasks{succeeded} = %d, want 3", n)
	}
	if n := m.count(t, "taskbroker.worker.tasks", "queue", f.queue, "outcome", "lease_lost"); n != 1 {
		t.Errorf("tasks{lease_lost} = %d, want 1", n)
	}
	if lines := recs.matching(slog.LevelWarn, "complete refused: lease lost"); len(lines) != 1 || !strings.Contains(lines[0], ids[3]) {
		t.Errorf("WARN lines for the lost lease: %q, want one naming %s", lines, ids[3])
	}
}

// A batch the broker refuses as a whole (one result over its size limit) is sent again one
// Complete at a time: the others succeed.
func TestABatchRefusedWholeIsSentOneByOne(t *testing.T) {
	f := newFixture(t)
	m := newMeter()
	conn := &gatedConn{ClientConnInterface: f.conn, method: "Complete", held: make(chan struct{}), open: make(chan struct{})}
	ids := f.submit(t, &pb.TaskSpec{Payload: []byte("1")}, &pb.TaskSpec{Payload: []byte("2")},
		&pb.TaskSpec{Payload: []byte("3")}, &pb.TaskSpec{Payload: []byte("big")})
	started := make(chan struct{}, 4)
	first, last := make(chan struct{}), make(chan struct{})
	w, err := worker.New(conn, worker.Config{Queues: []string{f.queue}, WorkerID: "test-go", Concurrency: 4,
		PollWait: time.Second, MeterProvider: m.provider, Logger: (&records{}).logger()},
		func(ctx context.Context, task *worker.Task) ([]byte, error) {
			started <- struct{}{}
			if string(task.GetPayload()) != "big" {
				<-first
				return []byte("done"), nil
			}
			<-last
			return make([]byte, 1<<20+1), nil // over the broker's 1 MiB result limit
		})
	if err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	for range 4 {
		<-started
	}
	close(first)
	<-conn.held
	waitFor(t, "two Completes queued", func() bool { return w.QueuedCompletions() == 2 })
	close(last)
	waitFor(t, "three Completes queued", func() bool { return w.QueuedCompletions() == 3 })
	close(conn.open)
	for _, id := range ids[:3] {
		f.waitState(t, id, pb.TaskState_TASK_STATE_SUCCEEDED)
	}
	waitFor(t, "the refused completion counted", func() bool {
		return m.count(t, "taskbroker.worker.tasks", "queue", f.queue, "outcome", "failed") == 1
	})
	// 1 alone, 1 CompleteMany refused, then its 3 on their own.
	if c, cm := m.count(t, "taskbroker.worker.settle.calls", "rpc", "Complete"), m.count(t, "taskbroker.worker.settle.calls", "rpc", "CompleteMany"); c != 4 || cm != 1 {
		t.Errorf("settle calls: %d Complete, %d CompleteMany; want 4 and 1", c, cm)
	}
}

// A lone Complete is sent at once as a plain Complete, not held for company.
func TestALoneCompleteIsAPlainComplete(t *testing.T) {
	f := newFixture(t)
	m := newMeter()
	ids := f.submit(t, &pb.TaskSpec{Payload: []byte("x")})
	f.start(t, worker.Config{MeterProvider: m.provider, DisableLeaseNext: true},
		func(ctx context.Context, task *worker.Task) ([]byte, error) { return []byte("ok"), nil })
	f.waitState(t, ids[0], pb.TaskState_TASK_STATE_SUCCEEDED)
	waitFor(t, "the task counted", func() bool {
		return m.count(t, "taskbroker.worker.tasks", "queue", f.queue, "outcome", "succeeded") == 1
	})
	if c, cm := m.count(t, "taskbroker.worker.settle.calls", "rpc", "Complete"), m.count(t, "taskbroker.worker.settle.calls", "rpc", "CompleteMany"); c != 1 || cm != 0 {
		t.Errorf("settle calls: %d Complete, %d CompleteMany; want 1 and 0", c, cm)
	}
}
