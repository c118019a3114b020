// Command faults runs clients/conformance/FAULTS.md against the broker at $TASKBROKER_ADDR,
// which scripts/conformance.sh go --faults kills, restarts and pauses on request (the control
// FIFOs $TASKBROKER_FAULT_CTL and $TASKBROKER_FAULT_ACK). It prints one PASS/FAIL line per case,
// then "N passed, M failed"; exits 0 only when M is 0.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

const workerID = "conf-go"

type env struct {
	conn   *grpc.ClientConn
	broker pb.BrokerServiceClient
	admin  pb.AdminServiceClient
}

var cases = []struct {
	name string
	run  func(e *env, queue string) error
}{
	{"restart_mid_settle", restartMidSettle},
	{"paused_past_lease", pausedPastLease},
	{"stop_bound", stopBound},
	{"wrong_result_type", wrongResultType},
	{"http_port", httpPort},
	{"settle_batching", settleBatching},
}

func main() {
	conn, err := taskbroker.NewClient(os.Getenv("TASKBROKER_ADDR"), taskbroker.FromEnv())
	if err != nil {
		fmt.Println("FAIL connect:", err)
		os.Exit(1)
	}
	e := &env{conn: conn, broker: pb.NewBrokerServiceClient(conn), admin: pb.NewAdminServiceClient(conn)}
	passed, failed := 0, 0
	for _, c := range cases {
		queue := fmt.Sprintf("conf.go.%s.%06x", c.name, rand.Uint32()&0xffffff)
		if err := c.run(e, queue); err != nil {
			failed++
			fmt.Printf("FAIL %s: %v\n", c.name, err)
		} else {
			passed++
			fmt.Printf("PASS %s\n", c.name)
		}
	}
	fmt.Printf("%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		os.Exit(1)
	}
}

// fault asks scripts/conformance.sh to do command to the broker; returns once it is done.
func fault(command string) error {
	ctl, err := os.OpenFile(os.Getenv("TASKBROKER_FAULT_CTL"), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = ctl.WriteString(command + "\n")
	ctl.Close()
	if err != nil {
		return err
	}
	ack, err := os.Open(os.Getenv("TASKBROKER_FAULT_ACK"))
	if err != nil {
		return err
	}
	defer ack.Close()
	reply, _ := bufio.NewReader(ack).ReadString('\n')
	if reply = strings.TrimSpace(reply); reply != "ok" {
		return fmt.Errorf("fault %s: %s", command, reply)
	}
	return nil
}

// logLines keeps the worker's log lines (message and attributes) by level.
type logLines struct {
	mu    sync.Mutex
	lines []string
	attrs string
}

type lineHandler struct {
	l     *logLines
	attrs string
}

func (h lineHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h lineHandler) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message + h.attrs
	r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	h.l.mu.Lock()
	h.l.lines = append(h.l.lines, line)
	h.l.mu.Unlock()
	return nil
}
func (h lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	for _, a := range as {
		h.attrs += " " + a.String()
	}
	return h
}
func (h lineHandler) WithGroup(string) slog.Handler { return h }

func (l *logLines) warnsNaming(text string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.HasPrefix(line, "WARN ") && strings.Contains(line, text) {
			out = append(out, line)
		}
	}
	return out
}

// start runs a worker; stop ends Run's context and returns how long Run took to return.
func start(e *env, addrConn grpc.ClientConnInterface, cfg worker.Config, h worker.Handler) (stop func() time.Duration, done chan error, err error) {
	cfg.WorkerID = workerID
	if cfg.PollWait == 0 {
		cfg.PollWait = time.Second
	}
	w, err := worker.New(addrConn, cfg, h)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var took time.Duration
	stop = func() time.Duration {
		once.Do(func() {
			t0 := time.Now()
			cancel()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
			}
			took = time.Since(t0)
		})
		return took
	}
	return stop, done, nil
}

func submit(e *env, queue string, n int, retry *pb.RetryPolicy) ([]string, error) {
	var specs []*pb.TaskSpec
	for range n {
		specs = append(specs, &pb.TaskSpec{Queue: queue, Payload: []byte("x"), Retry: retry})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.broker.Submit(ctx, &pb.SubmitRequest{Tasks: specs})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, r := range resp.GetResults() {
		ids = append(ids, r.GetTaskId())
	}
	return ids, nil
}

func getTask(e *env, id string) (*pb.Task, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.admin.GetTask(ctx, &pb.GetTaskRequest{TaskId: id})
	return resp.GetTask(), err
}

// waitFinished polls GetTask until the task is in a final state or within runs out.
func waitFinished(e *env, id string, within time.Duration) (*pb.Task, error) {
	end := time.Now().Add(within)
	for {
		t, err := getTask(e, id)
		if err == nil {
			switch t.GetState() {
			case pb.TaskState_TASK_STATE_SUCCEEDED, pb.TaskState_TASK_STATE_DEAD, pb.TaskState_TASK_STATE_CANCELLED:
				return t, nil
			}
		}
		if time.Now().After(end) {
			if err != nil {
				return nil, err
			}
			return t, fmt.Errorf("task %s is %v after %v", id, t.GetState(), within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func restartMidSettle(e *env, queue string) error {
	ids, err := submit(e, queue, 3, nil)
	if err != nil {
		return err
	}
	started := make(chan struct{}, 3)
	release := make(chan struct{})
	var runs atomic.Int32
	stop, _, err := start(e, e.conn, worker.Config{Queues: []string{queue}, Concurrency: 3, LeaseDuration: 30 * time.Second},
		func(ctx context.Context, t *worker.Task) ([]byte, error) {
			runs.Add(1)
			started <- struct{}{}
			<-release
			return []byte("done"), nil
		})
	if err != nil {
		return err
	}
	defer stop()
	var once sync.Once
	defer once.Do(func() { close(release) })
	for range 3 {
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			return errors.New("the handlers did not all start within 20 s")
		}
	}
	if err := fault("kill"); err != nil {
		return err
	}
	once.Do(func() { close(release) })
	time.Sleep(4 * time.Second) // the outage itself (FAULTS.md): longer than five quick retries take
	if err := fault("start"); err != nil {
		return err
	}
	for _, id := range ids {
		t, err := waitFinished(e, id, 25*time.Second)
		if err != nil {
			return err
		}
		if t.GetState() != pb.TaskState_TASK_STATE_SUCCEEDED || t.GetAttempt() != 1 || string(t.GetResult()) != "done" {
			return fmt.Errorf("task %s is %v attempt %d result %q (last error %q), want SUCCEEDED attempt 1 \"done\"",
				id, t.GetState(), t.GetAttempt(), t.GetResult(), t.GetLastError())
		}
	}
	if n := runs.Load(); n != 3 {
		return fmt.Errorf("the handler ran %d times for 3 tasks", n)
	}
	return nil
}

func pausedPastLease(e *env, queue string) error {
	ids, err := submit(e, queue, 1, &pb.RetryPolicy{MaxAttempts: 3, InitialBackoff: durationpb.New(0)})
	if err != nil {
		return err
	}
	id := ids[0]
	lines := &logLines{}
	started := make(chan struct{})
	type told struct {
		cause error
		at    time.Time
	}
	toldCh := make(chan told, 1)
	const lease = 2 * time.Second
	stop, _, err := start(e, e.conn, worker.Config{Queues: []string{queue}, Concurrency: 1, LeaseDuration: lease,
		Logger: slog.New(lineHandler{l: lines})},
		func(ctx context.Context, t *worker.Task) ([]byte, error) {
			if t.GetAttempt() > 1 {
				return []byte("second"), nil
			}
			close(started)
			select {
			case <-ctx.Done():
				toldCh <- told{context.Cause(ctx), time.Now()}
			case <-time.After(20 * time.Second):
				toldCh <- told{nil, time.Now()}
			}
			return []byte("late"), nil
		})
	if err != nil {
		return err
	}
	defer stop()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		return errors.New("the handler did not start within 20 s")
	}
	pausedAt := time.Now()
	if err := fault("pause"); err != nil {
		return err
	}
	got := <-toldCh
	if err := fault("resume"); err != nil {
		return err
	}
	if !errors.Is(got.cause, worker.ErrLeaseLost) {
		return fmt.Errorf("the handler was cancelled with %v, want ErrLeaseLost", got.cause)
	}
	if after := got.at.Sub(pausedAt); after > lease+time.Second {
		return fmt.Errorf("the handler was told %.1fs after the pause, want within the %v lease + 1s", after.Seconds(), lease)
	}
	t, err := waitFinished(e, id, 20*time.Second)
	if err != nil {
		return err
	}
	if t.GetState() != pb.TaskState_TASK_STATE_SUCCEEDED || t.GetAttempt() != 2 || string(t.GetResult()) != "second" {
		return fmt.Errorf("task is %v attempt %d result %q, want SUCCEEDED attempt 2 \"second\"", t.GetState(), t.GetAttempt(), t.GetResult())
	}
	if w := lines.warnsNaming(id); len(w) != 1 {
		return fmt.Errorf("%d WARN lines name the task, want 1: %q", len(w), w)
	}
	return nil
}

func stopBound(e *env, queue string) error {
	ids, err := submit(e, queue, 1, nil)
	if err != nil {
		return err
	}
	started, latch := make(chan struct{}), make(chan struct{})
	defer close(latch)
	const stopTimeout = 2 * time.Second
	stop, _, err := start(e, e.conn, worker.Config{Queues: []string{queue}, Concurrency: 1, StopTimeout: stopTimeout},
		func(ctx context.Context, t *worker.Task) ([]byte, error) {
			close(started)
			<-latch // ignores its cancellation
			return []byte("late"), nil
		})
	if err != nil {
		return err
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		return errors.New("the handler did not start within 20 s")
	}
	took := stop()
	if bound := stopTimeout + worker.StopMargin + time.Second; took > bound {
		return fmt.Errorf("stop took %.1fs, want at most %v", took.Seconds(), bound)
	}
	t, err := getTask(e, ids[0])
	if err != nil {
		return err
	}
	if t.GetState() != pb.TaskState_TASK_STATE_READY || t.GetAttempt() != 1 {
		return fmt.Errorf("after the stop the task is %v attempt %d, want READY attempt 1 (handed back)", t.GetState(), t.GetAttempt())
	}
	return nil
}

// wrongResultType: a Go handler returns bytes, so the wrong type is a result that cannot be
// encoded: its error fails the attempt at once.
func wrongResultType(e *env, queue string) error {
	ids, err := submit(e, queue, 1, &pb.RetryPolicy{MaxAttempts: 1})
	if err != nil {
		return err
	}
	stop, _, err := start(e, e.conn, worker.Config{Queues: []string{queue}},
		func(ctx context.Context, t *worker.Task) ([]byte, error) {
			return json.Marshal(map[string]any{"ch": make(chan int)})
		})
	if err != nil {
		return err
	}
	defer stop()
	t, err := waitFinished(e, ids[0], 10*time.Second)
	if err != nil {
		return err
	}
	if t.GetState() != pb.TaskState_TASK_STATE_DEAD || !strings.Contains(t.GetLastError(), "unsupported type") {
		return fmt.Errorf("task is %v, last error %q; want DEAD saying why the result could not be encoded", t.GetState(), t.GetLastError())
	}
	return nil
}

func httpPort(e *env, queue string) error {
	if err := httpPortFailFast(e, queue); err != nil {
		return err
	}
	conn, err := taskbroker.NewClient(os.Getenv("TASKBROKER_HTTP_ADDR"), taskbroker.FromEnv())
	if err != nil {
		return err
	}
	defer conn.Close()
	stop, done, err := start(e, conn, worker.Config{Queues: []string{queue}},
		func(ctx context.Context, t *worker.Task) ([]byte, error) { return nil, nil })
	if err != nil {
		return err
	}
	defer stop()
	select {
	case err := <-done:
		if err == nil {
			return errors.New("Run returned nil, want the error that stopped it")
		}
		done <- err // for stop
		return nil
	case <-time.After(20 * time.Second):
		return errors.New("the worker did not stop by itself within 20 s")
	}
}

// httpPortFailFast: with FailFast, the first Lease against the HTTP port ends Run at once
// with one plain line.
func httpPortFailFast(e *env, queue string) error {
	conn, err := taskbroker.NewClient(os.Getenv("TASKBROKER_HTTP_ADDR"), taskbroker.FromEnv())
	if err != nil {
		return err
	}
	defer conn.Close()
	stop, done, err := start(e, conn, worker.Config{Queues: []string{queue}, FailFast: true},
		func(ctx context.Context, t *worker.Task) ([]byte, error) { return nil, nil })
	if err != nil {
		return err
	}
	defer stop()
	select {
	case err := <-done:
		done <- err // for stop
		var stopped *worker.StoppedError
		if !errors.As(err, &stopped) || strings.Contains(err.Error(), "\n") {
			return fmt.Errorf("with FailFast Run returned %q, want one line of a *worker.StoppedError", err)
		}
		return nil
	case <-time.After(20 * time.Second):
		return errors.New("the FailFast worker did not stop by itself within 20 s")
	}
}

// settleBatching: ten handlers finish while the broker is paused; the first Complete is in
// flight, the other nine queue behind it and go as one CompleteMany once it returns.
func settleBatching(e *env, queue string) error {
	ids, err := submit(e, queue, 10, nil)
	if err != nil {
		return err
	}
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())
	started := make(chan struct{}, 10)
	latch := make(chan struct{})
	var latchOnce sync.Once
	openLatch := func() { latchOnce.Do(func() { close(latch) }) }
	defer openLatch()
	var runs sync.Map
	cfg := worker.Config{Queues: []string{queue}, Concurrency: 10, WorkerID: workerID, PollWait: time.Second,
		MeterProvider: provider}
	w, err := worker.New(e.conn, cfg, func(ctx context.Context, t *worker.Task) ([]byte, error) {
		n, _ := runs.LoadOrStore(t.GetTaskId(), new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		started <- struct{}{}
		<-latch
		return []byte("done"), nil
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for range 10 {
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			return errors.New("the 10 handlers did not all start within 20 s")
		}
	}
	if err := fault("pause"); err != nil {
		return err
	}
	openLatch()
	// The runtime's own count: nine Completes behind the one in flight to the paused broker.
	queued := false
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if w.QueuedCompletions() == 9 {
			queued = true
			break
		}
	}
	if err := fault("resume"); err != nil {
		return err
	}
	if !queued {
		return fmt.Errorf("%d completions queued behind the call in flight, want 9", w.QueuedCompletions())
	}
	for _, id := range ids {
		t, err := waitFinished(e, id, 20*time.Second)
		if err != nil {
			return err
		}
		n, _ := runs.Load(id)
		if t.GetState() != pb.TaskState_TASK_STATE_SUCCEEDED || t.GetAttempt() != 1 || n == nil || n.(*atomic.Int32).Load() != 1 {
			return fmt.Errorf("task %s is %v attempt %d, want SUCCEEDED at attempt 1, run once", id, t.GetState(), t.GetAttempt())
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		return err
	}
	calls := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "taskbroker.worker.settle.calls" {
				for _, dp := range sum.DataPoints {
					rpc, _ := dp.Attributes.Value("rpc")
					calls[rpc.AsString()] += dp.Value
				}
			}
		}
	}
	if len(calls) != 2 || calls["Complete"] != 1 || calls["CompleteMany"] != 1 {
		return fmt.Errorf("taskbroker.worker.settle.calls %v, want exactly 1 Complete and 1 CompleteMany", calls)
	}
	return nil
}
