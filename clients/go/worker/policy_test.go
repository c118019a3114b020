package worker_test

// The policy declared with a handler and TaskDef (docs/client-spec.md point 20), against a
// live broker at $TASKBROKER_ADDR (skipped without it).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"testing"
	"time"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

type invalidAddress struct{ to string }

func (e *invalidAddress) Error() string { return "invalid address " + e.to }

type letter struct{ To string }
type delivery struct {
	To      string
	Attempt uint32
}

// policyBroker dials the live broker with mux's retry defaults.
func policyBroker(t *testing.T, mux *worker.Mux) (pb.BrokerServiceClient, pb.AdminServiceClient, func(worker.Config)) {
	t.Helper()
	addr := os.Getenv("TASKBROKER_ADDR")
	if addr == "" {
		t.Skip("TASKBROKER_ADDR is not set; these tests need a live broker")
	}
	conn, err := taskbroker.NewClient(addr, taskbroker.FromEnv(), taskbroker.WithRetryDefaults(mux.RetryDefaults()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	run := func(cfg worker.Config) {
		w, err := mux.Worker(conn, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker: %v", err)
			}
		})
	}
	return pb.NewBrokerServiceClient(conn), pb.NewAdminServiceClient(conn), run
}

func policyQueue(t *testing.T) string {
	return fmt.Sprintf("test.go.%s.%d", t.Name(), rand.Uint32())
}

func getTask(t *testing.T, admin pb.AdminServiceClient, id string) *pb.Task {
	t.Helper()
	r, err := admin.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetTask()
}

func TestHandlerRetryDefaultsFillWhatTheSpecLeavesUnset(t *testing.T) {
	q := policyQueue(t)
	mux := worker.NewMux()
	mux.HandlePolicy(q, worker.HandleJSON(func(context.Context, *worker.Task, letter) (delivery, error) { return delivery{}, nil }),
		worker.Policy{MaxAttempts: 7, Backoff: 42 * time.Second})
	broker, admin, _ := policyBroker(t, mux)
	ctx := context.Background()

	plain, err := taskbroker.SubmitJSON(ctx, broker, q, letter{To: "a"})
	if err != nil {
		t.Fatal(err)
	}
	got := getTask(t, admin, plain.GetTaskId())
	if got.GetMaxAttempts() != 7 || got.GetRetry().GetInitialBackoff().GetSeconds() != 42 {
		t.Fatalf("want the handler's 7 attempts and 42 s backoff, got %d and %v", got.GetMaxAttempts(), got.GetRetry().GetInitialBackoff())
	}
	own, err := taskbroker.SubmitJSON(ctx, broker, q, letter{To: "b"}, taskbroker.WithRetry(&pb.RetryPolicy{MaxAttempts: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if got := getTask(t, admin, own.GetTaskId()); got.GetMaxAttempts() != 2 || got.GetRetry().GetInitialBackoff().GetSeconds() != 42 {
		t.Fatalf("the spec's own max_attempts wins, the rest filled: got %d, %v", got.GetMaxAttempts(), got.GetRetry().GetInitialBackoff())
	}
	other, err := taskbroker.SubmitJSON(ctx, broker, q+".other", letter{})
	if err != nil {
		t.Fatal(err)
	}
	if got := getTask(t, admin, other.GetTaskId()).GetMaxAttempts(); got != 3 {
		t.Fatalf("another queue keeps the broker's default: got %d", got)
	}
}

func TestANonRetryableErrorTypeEndsTheTaskDeadAtAttemptOne(t *testing.T) {
	q := policyQueue(t)
	def := taskbroker.Define[letter, delivery](q)
	mux := worker.NewMux()
	worker.HandleTask(mux, def, func(_ context.Context, task *worker.Task, e letter) (delivery, error) {
		if e.To == "" {
			return delivery{}, fmt.Errorf("send: %w", &invalidAddress{to: "(none)"})
		}
		return delivery{To: e.To, Attempt: task.GetAttempt()}, nil
	}, worker.Policy{MaxAttempts: 5, NonRetryable: []func(error) bool{worker.AsError[*invalidAddress]()}})
	broker, admin, run := policyBroker(t, mux)
	run(worker.Config{PollWait: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	got, err := def.SubmitAndWait(ctx, broker, admin, letter{To: "ada"})
	if err != nil || got != (delivery{To: "ada", Attempt: 1}) {
		t.Fatalf("got %+v, %v", got, err)
	}
	_, err = def.SubmitAndWait(ctx, broker, admin, letter{})
	var failed *taskbroker.TaskFailedError
	if !errors.As(err, &failed) || failed.State != pb.TaskState_TASK_STATE_DEAD {
		t.Fatalf("want a DEAD TaskFailedError, got %v", err)
	}
	task := getTask(t, admin, failed.TaskID)
	if task.GetAttempt() != 1 || task.GetMaxAttempts() != 5 {
		t.Fatalf("not retried: want attempt 1 of 5, got %d of %d", task.GetAttempt(), task.GetMaxAttempts())
	}
}

func TestATaskDefDelaysAndRetry(t *testing.T) {
	q := policyQueue(t)
	def := taskbroker.Define[letter, delivery](q).WithRetryPolicy(&pb.RetryPolicy{MaxAttempts: 4})
	broker, admin, _ := policyBroker(t, worker.NewMux())
	ctx := context.Background()
	later, err := def.SubmitIn(ctx, broker, letter{To: "x"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := getTask(t, admin, later.GetTaskId()); got.GetState() != pb.TaskState_TASK_STATE_SCHEDULED || got.GetMaxAttempts() != 4 {
		t.Fatalf("want SCHEDULED with 4 attempts, got %v %d", got.GetState(), got.GetMaxAttempts())
	}
	at := time.Now().Add(2 * time.Hour).Truncate(time.Second)
	fixed, err := def.SubmitAt(ctx, broker, letter{To: "y"}, at)
	if err != nil {
		t.Fatal(err)
	}
	if got := getTask(t, admin, fixed.GetTaskId()).GetRunAt().AsTime(); !got.Equal(at) {
		t.Fatalf("run_at: want %v, got %v", at, got)
	}
}

func TestAQueueWithItsOwnConcurrencyHoldsThatManyLeases(t *testing.T) {
	q := policyQueue(t)
	mux := worker.NewMux()
	started := make(chan struct{}, 3)
	gate := make(chan struct{})
	var running, peak atomic.Int32
	mux.HandlePolicy(q, worker.HandleJSON(func(context.Context, *worker.Task, int) (int, error) {
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		started <- struct{}{}
		<-gate
		running.Add(-1)
		return 0, nil
	}), worker.Policy{Concurrency: 1})
	broker, admin, run := policyBroker(t, mux)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ids []string
	for i := range 3 { // waiting before the worker starts: 4 shared slots would lease all three
		r, err := taskbroker.SubmitJSON(ctx, broker, q, i)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.GetTaskId())
	}
	run(worker.Config{Concurrency: 4, PollWait: time.Second})
	<-started
	leased := 0
	for _, id := range ids {
		if getTask(t, admin, id).GetState() == pb.TaskState_TASK_STATE_LEASED {
			leased++
		}
	}
	if leased != 1 {
		t.Fatalf("one slot: want 1 lease, got %d", leased)
	}
	close(gate)
	for _, id := range ids {
		if _, err := taskbroker.Wait(ctx, admin, id); err != nil {
			t.Fatal(err)
		}
	}
	if p := peak.Load(); p != 1 {
		t.Fatalf("at most 1 at once, saw %d", p)
	}
}
