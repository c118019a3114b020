package worker_test

// The worker under faults (docs/client-spec.md point 11), against the live broker with a
// connection that makes chosen calls fail or hang, as an outage or a paused broker would.

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

// faultyConn passes calls to the broker except that fault, when it returns true, answers a
// call itself (err, or hanging until release when err is nil).
type faultyConn struct {
	grpc.ClientConnInterface
	fault   func(ctx context.Context, method string) (handled bool, err error)
	release chan struct{}
}

func (c *faultyConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if handled, err := c.fault(ctx, method); handled {
		if err == nil {
			<-c.release // a frozen broker: no answer, whatever the call's deadline
			return status.Error(codes.Unavailable, "released")
		}
		return err
	}
	return c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
}

// records keeps a worker's log lines: level, message and attributes (With's included).
type records struct {
	mu    sync.Mutex
	lines []logLine
}

type logLine struct {
	level slog.Level
	text  string
}

type recHandler struct {
	r     *records
	attrs string
}

func (r *records) logger() *slog.Logger { return slog.New(recHandler{r: r}) }

func (h recHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recHandler) Handle(_ context.Context, rec slog.Record) error {
	line := rec.Message + h.attrs
	rec.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	h.r.mu.Lock()
	h.r.lines = append(h.r.lines, logLine{rec.Level, line})
	h.r.mu.Unlock()
	return nil
}
func (h recHandler) WithAttrs(as []slog.Attr) slog.Handler {
	for _, a := range as {
		h.attrs += " " + a.String()
	}
	return h
}
func (h recHandler) WithGroup(string) slog.Handler { return h }

// matching returns the lines at level that contain text.
func (r *records) matching(level slog.Level, text string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, l := range r.lines {
		if l.level == level && strings.Contains(l.text, text) {
			out = append(out, l.text)
		}
	}
	return out
}

func (f *fixture) startOn(t *testing.T, conn grpc.ClientConnInterface, cfg worker.Config, h worker.Handler) (stop func() time.Duration) {
	t.Helper()
	cfg.Queues = []string{f.queue}
	cfg.WorkerID = "test-go"
	cfg.PollWait = time.Second
	w, err := worker.New(conn, cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() (took time.Duration) {
		once.Do(func() {
			start := time.Now()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			took = time.Since(start)
		})
		return took
	}
	t.Cleanup(func() { stop() })
	return stop
}

// A Complete that meets an outage longer than five quick tries is retried until it goes
// through, inside the lease: the task runs once.
func TestCompleteIsRetriedAcrossAnOutageWithinTheLease(t *testing.T) {
	f := newFixture(t)
	ids := f.submit(t, &pb.TaskSpec{Payload: []byte("x")})
	var refused atomic.Int32
	conn := &faultyConn{ClientConnInterface: f.conn, fault: func(_ context.Context, m string) (bool, error) {
		if strings.HasSuffix(m, "/Complete") && refused.Add(1) <= 6 {
			return true, status.Error(codes.Unavailable, "connection refused")
		}
		return false, nil
	}}
	var runs atomic.Int32
	m := newMeter()
	f.startOn(t, conn, worker.Config{MeterProvider: m.provider}, func(ctx context.Context, task *worker.Task) ([]byte, error) {
		runs.Add(1)
		return []byte("done"), nil
	})
	var task *pb.Task
	for deadline := time.Now().Add(25 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := f.admin.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: ids[0]})
		if err != nil {
			t.Fatal(err)
		}
		if task = resp.GetTask(); task.GetState() == pb.TaskState_TASK_STATE_SUCCEEDED {
			break
		}
	}
	if task.GetState() != pb.TaskState_TASK_STATE_SUCCEEDED || task.GetAttempt() != 1 || runs.Load() != 1 || string(task.GetResult()) != "done" {
		t.Fatalf("%v, attempt %d, %d runs, result %q; want SUCCEEDED in one run", task.GetState(), task.GetAttempt(), runs.Load(), task.GetResult())
	}
	waitFor(t, "the task counted", func() bool {
		return m.count(t, "taskbroker.worker.tasks", "queue", f.queue, "outcome", "succeeded") == 1
	})
	if n := m.count(t, "taskbroker.worker.settle.retries", "queue", f.queue); n != 6 {
		t.Errorf("taskbroker.worker.settle.retries = %d, want 6 (one per refused Complete)", n)
	}
}

// A handler that ignores its cancellation does not hold the stop: its task is handed back
// (READY at once, attempt 1) and Run returns.
func TestStopHandsBackATaskWhoseHandlerIgnoresCancellation(t *testing.T) {
	f := newFixture(t)
	ids := f.submit(t, &pb.TaskSpec{Payload: []byte("x")})
	started, latch := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(latch) })
	logs := &records{}
	stop := f.startOn(t, f.conn, worker.Config{StopTimeout: time.Second, Logger: logs.logger()},
		func(ctx context.Context, task *worker.Task) ([]byte, error) {
			close(started)
			<-latch
			return []byte("late"), nil
		})
	<-started
	stop()
	resp, err := f.admin.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: ids[0]})
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.GetTask().GetState(); st != pb.TaskState_TASK_STATE_READY || resp.GetTask().GetAttempt() != 1 {
		t.Fatalf("after the stop the task is %v (attempt %d), want READY", st, resp.GetTask().GetAttempt())
	}
	if n := len(logs.matching(slog.LevelWarn, ids[0])); n != 1 {
		t.Errorf("%d WARN lines name the handed-back task, want 1", n)
	}
}

// A stop whose hand-back meets a frozen broker still returns (the hand-back has its own
// deadline).
func TestStopReturnsWhenTheBrokerFreezesDuringTheHandBack(t *testing.T) {
	f := newFixture(t)
	f.submit(t, &pb.TaskSpec{Payload: []byte("x")})
	var frozen atomic.Bool
	conn := &faultyConn{ClientConnInterface: f.conn, release: make(chan struct{}),
		fault: func(ctx context.Context, m string) (bool, error) {
			if frozen.Load() {
				<-ctx.Done() // the broker answers nothing; the caller's deadline ends the call
				return true, status.FromContextError(ctx.Err()).Err()
			}
			return false, nil
		}}
	started, latch := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(latch) })
	stop := f.startOn(t, conn, worker.Config{StopTimeout: time.Second},
		func(ctx context.Context, task *worker.Task) ([]byte, error) {
			close(started)
			<-latch
			return nil, nil
		})
	<-started
	frozen.Store(true)
	stop() // returns: a hand-back without a deadline would wait on the frozen broker forever
}

// With heartbeats unanswered (a paused broker), the handler is cancelled when its lease
// expires by the local clock, and the loss is logged once at WARN with the task id.
func TestTheLocalClockCancelsAHandlerWhoseLeaseExpired(t *testing.T) {
	f := newFixture(t)
	ids := f.submit(t, &pb.TaskSpec{Payload: []byte("x")})
	conn := &faultyConn{ClientConnInterface: f.conn, release: make(chan struct{}),
		fault: func(_ context.Context, m string) (bool, error) {
			return strings.HasSuffix(m, "/Heartbeat"), nil // hangs, deadline or not
		}}
	logs := &records{}
	cause := make(chan error, 1)
	m := newMeter()
	f.startOn(t, conn, worker.Config{LeaseDuration: time.Second, StopTimeout: time.Second, Logger: logs.logger(), MeterProvider: m.provider},
		func(ctx context.Context, task *worker.Task) ([]byte, error) {
			if task.GetAttempt() > 1 {
				return []byte("second"), nil
			}
			select {
			case <-ctx.Done():
				cause <- context.Cause(ctx)
			case <-time.After(20 * time.Second):
				cause <- nil
			}
			return []byte("late"), nil
		})
	err := <-cause
	close(conn.release) // the broker answers again
	if err != worker.ErrLeaseLost {
		t.Fatalf("the handler's cause is %v, want ErrLeaseLost", err)
	}
	f.waitState(t, ids[0], pb.TaskState_TASK_STATE_SUCCEEDED)
	if n := len(logs.matching(slog.LevelWarn, "attempt=1")); n != 1 {
		t.Errorf("%d WARN lines for attempt 1, want 1: %v", n, logs.matching(slog.LevelWarn, ""))
	}
	if n := m.count(t, "taskbroker.worker.leases.lost", "queue", f.queue); n != 1 {
		t.Errorf("taskbroker.worker.leases.lost = %d, want 1", n)
	}
	if n := m.count(t, "taskbroker.worker.tasks", "queue", f.queue, "outcome", "lease_lost"); n != 1 {
		t.Errorf("taskbroker.worker.tasks{lease_lost} = %d, want 1", n)
	}
}

// Task.Checkpoint carries the spec's call deadline even when the handler's context has none.
func TestCheckpointHasACallDeadline(t *testing.T) {
	f := newFixture(t)
	ids := f.submit(t, &pb.TaskSpec{Payload: []byte("x")})
	var hadDeadline atomic.Int32 // 1 = no, 2 = yes
	conn := &faultyConn{ClientConnInterface: f.conn, fault: func(ctx context.Context, m string) (bool, error) {
		if strings.HasSuffix(m, "/Checkpoint") {
			_, ok := ctx.Deadline()
			hadDeadline.Store(map[bool]int32{false: 1, true: 2}[ok])
		}
		return false, nil
	}}
	f.startOn(t, conn, worker.Config{}, func(ctx context.Context, task *worker.Task) ([]byte, error) {
		return nil, task.Checkpoint(context.Background(), []byte("c"))
	})
	f.waitState(t, ids[0], pb.TaskState_TASK_STATE_SUCCEEDED)
	if hadDeadline.Load() != 2 {
		t.Fatal("Checkpoint was sent without a deadline")
	}
}

// A panic is logged at ERROR with its message and stack, and fails the attempt.
func TestAPanicIsLoggedWithItsStack(t *testing.T) {
	f := newFixture(t)
	ids := f.submit(t, &pb.TaskSpec{Payload: []byte("x"), Retry: &pb.RetryPolicy{MaxAttempts: 1}})
	logs := &records{}
	f.startOn(t, f.conn, worker.Config{Logger: logs.logger()}, func(ctx context.Context, task *worker.Task) ([]byte, error) {
		panic("boom in handler")
	})
	task := f.waitState(t, ids[0], pb.TaskState_TASK_STATE_DEAD)
	if !strings.Contains(task.GetLastError(), "boom in handler") {
		t.Errorf("last_error %q", task.GetLastError())
	}
	lines := logs.matching(slog.LevelError, "boom in handler")
	if len(lines) == 0 || !strings.Contains(strings.Join(lines, "\n"), "faults_test.go") {
		t.Fatalf("no ERROR line with the panic and its stack: %v", lines)
	}
}
