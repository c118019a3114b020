package worker_test

// These tests run against a live broker at $TASKBROKER_ADDR (scripts/conformance.sh go
// starts one) and are skipped without it.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

type fixture struct {
	conn   *grpc.ClientConn
	broker pb.BrokerServiceClient
	admin  pb.AdminServiceClient
	queue  string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	addr := os.Getenv("TASKBROKER_ADDR")
	if addr == "" {
		t.Skip("TASKBROKER_ADDR is not set; these tests need a live broker")
	}
	conn, err := taskbroker.NewClient(addr, taskbroker.FromEnv())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &fixture{
		conn:   conn,
		broker: pb.NewBrokerServiceClient(conn),
		admin:  pb.NewAdminServiceClient(conn),
		queue:  fmt.Sprintf("test.go.%s.%d", t.Name(), rand.Uint32()),
	}
}

func (f *fixture) submit(t *testing.T, specs ...*pb.TaskSpec) []string {
	t.Helper()
	for _, s := range specs {
		s.Queue = f.queue
	}
	resp, err := f.broker.Submit(context.Background(), &pb.SubmitRequest{Tasks: specs})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	var ids []string
	for _, r := range resp.GetResults() {
		ids = append(ids, r.GetTaskId())
	}
	return ids
}

// start runs a worker on the fixture's queue and returns a stop func that waits for Run.
func (f *fixture) start(t *testing.T, cfg worker.Config, h worker.Handler) (stop func()) {
	t.Helper()
	cfg.Queues = []string{f.queue}
	cfg.WorkerID = "test-go"
	if cfg.PollWait == 0 {
		cfg.PollWait = time.Second
	}
	w, err := worker.New(f.conn, cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitState polls GetTask until the task is in want, failing after 15 s.
func (f *fixture) waitState(t *testing.T, id string, want pb.TaskState) *pb.Task {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := f.admin.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: id})
		if err != nil {
			t.Fatalf("GetTask: %v", err)
		}
		if resp.GetTask().GetState() == want {
			return resp.GetTask()
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s is %v, want %v", id, resp.GetTask().GetState(), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestWorkerCompletesTasksWithinItsConcurrency(t *testing.T) {
	f := newFixture(t)
	var specs []*pb.TaskSpec
	for i := range 6 {
		specs = append(specs, &pb.TaskSpec{Payload: []byte(fmt.Sprint(i))})
	}
	ids := f.submit(t, specs...)
	var running, peak atomic.Int32
	f.start(t, worker.Config{Concurrency: 2}, func(ctx context.Context, task *worker.Task) ([]byte, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
		return append([]byte("done:"), task.GetPayload()...), nil
	})
	for i, id := range ids {
		task := f.waitState(t, id, pb.TaskState_TASK_STATE_SUCCEEDED)
		if want := fmt.Sprintf("done:%d", i); string(task.GetResult()) != want {
			t.Errorf("result %q, want %q", task.GetResult(), want)
		}
	}
	if p := peak.Load(); p > 2 {
		t.Errorf("%d handlers ran at once, want at most 2", p)
	}
}

func TestWorkerRetriesPlainErrorsAndBuriesPermanentOnes(t *testing.T) {
	f := newFixture(t)
	retry := &pb.RetryPolicy{MaxAttempts: 3, InitialBackoff: durationpb.New(0)}
	ids := f.submit(t,
		&pb.TaskSpec{Payload: []byte("flaky"), Retry: retry},
		&pb.TaskSpec{Payload: []byte("broken"), Retry: retry},
	)
	f.start(t, worker.Config{Concurrency: 2}, func(ctx context.Context, task *worker.Task) ([]byte, error) {
		if string(task.GetPayload()) == "broken" {
			return nil, worker.Permanentf("cannot parse %q", task.GetPayload())
		}
		if task.GetAttempt() == 1 {
			return nil, errors.New("transient")
		}
		return []byte(fmt.Sprint(task.GetAttempt())), nil
	})
	flaky := f.waitState(t, ids[0], pb.TaskState_TASK_STATE_SUCCEEDED)
	if string(flaky.GetResult()) != "2" {
		t.Errorf("flaky task finished on attempt %s, want 2", flaky.GetResult())
	}
	broken := f.waitState(t, ids[1], pb.TaskState_TASK_STATE_DEAD)
	if broken.GetAttempt() != 1 || broken.GetLastError() != `cannot parse "broken"` {
		t.Errorf("broken task: attempt %d last_error %q", broken.GetAttempt(), broken.GetLastError())
	}
}

func TestCheckpointIsVisibleToTheHandlerAndTheNextAttempt(t *testing.T) {
	f := newFixture(t)
	ids := f.submit(t, &pb.TaskSpec{Retry: &pb.RetryPolicy{MaxAttempts: 2, InitialBackoff: durationpb.New(0)}})
	var seen []string
	var mu sync.Mutex
	f.start(t, worker.Config{}, func(ctx context.Context, task *worker.Task) ([]byte, error) {
		before, _ := task.LastCheckpoint()
		if err := task.Checkpoint(ctx, []byte(fmt.Sprintf("after-%d", task.GetAttempt()))); err != nil {
			return nil, err
		}
		after, _ := task.LastCheckpoint()
		mu.Lock()
		seen = append(seen, string(before)+"|"+string(after))
		mu.Unlock()
		if task.GetAttempt() == 1 {
			return nil, errors.New("try again")
		}
		return nil, nil
	})
	f.waitState(t, ids[0], pb.TaskState_TASK_STATE_SUCCEEDED)
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != "[|after-1 after-1|after-2]" {
		t.Errorf("checkpoints seen %v, want [|after-1 after-1|after-2]", seen)
	}
}

func TestCancelRequestedReachesTheHandlerThroughHeartbeats(t *testing.T) {
	f := newFixture(t)
	ids := f.submit(t, &pb.TaskSpec{})
	started := make(chan struct{})
	var cause atomic.Value
	m := newMeter()
	// 3 s leases: a heartbeat every second.
	f.start(t, worker.Config{LeaseDuration: 3 * time.Second, MeterProvider: m.provider}, func(ctx context.Context, task *worker.Task) ([]byte, error) {
		close(started)
		<-ctx.Done()
		cause.Store(context.Cause(ctx))
		return nil, context.Cause(ctx)
	})
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("handler never started")
	}
	if _, err := f.admin.CancelTask(context.Background(), &pb.CancelTaskRequest{TaskId: ids[0]}); err != nil {
		t.Fatalf("CancelTask: %v", err)
	}
	f.waitState(t, ids[0], pb.TaskState_TASK_STATE_CANCELLED)
	if c, _ := cause.Load().(error); !errors.Is(c, worker.ErrCancelRequested) {
		t.Errorf("handler context cause %v, want ErrCancelRequested", c)
	}
	waitFor(t, "the cancelled attempt counted", func() bool {
		return m.count(t, "taskbroker.worker.tasks", "queue", f.queue, "outcome", "cancelled") == 1
	})
}

func TestStopLetsRunningHandlersFinish(t *testing.T) {
	f := newFixture(t)
	ids := f.submit(t, &pb.TaskSpec{})
	started := make(chan struct{})
	stop := f.start(t, worker.Config{}, func(ctx context.Context, task *worker.Task) ([]byte, error) {
		close(started)
		time.Sleep(500 * time.Millisecond)
		return []byte("finished"), nil
	})
	<-started
	stop()
	// Run has returned, so the result must already be reported.
	resp, err := f.admin.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: ids[0]})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetTask().GetState() != pb.TaskState_TASK_STATE_SUCCEEDED {
		t.Errorf("after stop: state %v, want SUCCEEDED", resp.GetTask().GetState())
	}
}

type ctxKey struct{}

func TestHandlersSeeTheValuesOfRunsContext(t *testing.T) {
	f := newFixture(t)
	ids := f.submit(t, &pb.TaskSpec{})
	seen := make(chan any, 1)
	w, err := worker.New(f.conn, worker.Config{Queues: []string{f.queue}, WorkerID: "test-go", PollWait: time.Second},
		func(ctx context.Context, _ *worker.Task) ([]byte, error) {
			seen <- ctx.Value(ctxKey{})
			return nil, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "request-scoped"))
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	f.waitState(t, ids[0], pb.TaskState_TASK_STATE_SUCCEEDED)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v after its context ended, want nil", err)
	}
	if got := <-seen; got != "request-scoped" {
		t.Fatalf("handler saw %v, want the value from Run's context", got)
	}
}

// Routing: a worker's labels go with every Lease; a task targeted at other
// labels waits.
func TestAWorkerWithLabelsRunsTheTasksTargetedAtThem(t *testing.T) {
	f := newFixture(t)
	ids := f.submit(t,
		&pb.TaskSpec{Payload: []byte("mine"), Target: &pb.Target{Labels: map[string]string{"gpu": "a100"}}},
		&pb.TaskSpec{Target: &pb.Target{Labels: map[string]string{"gpu": "h100"}}},
	)
	f.start(t, worker.Config{Labels: map[string]string{"gpu": "a100", "region": "eu"}},
		func(ctx context.Context, task *worker.Task) ([]byte, error) {
			return task.GetPayload(), nil
		})
	if got := f.waitState(t, ids[0], pb.TaskState_TASK_STATE_SUCCEEDED); string(got.GetResult()) != "mine" {
		t.Errorf("result %q, want mine", got.GetResult())
	}
	resp, err := f.admin.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: ids[1]})
	if err != nil {
		t.Fatalf("GetTask: %v", err)
	}
	if s := resp.GetTask().GetState(); s != pb.TaskState_TASK_STATE_READY {
		t.Errorf("the task for other labels is %v, want READY", s)
	}
}
