package worker_test

// lease_next: a settle carries the next lease. Live broker, as worker_test.go.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

// run starts a worker on the fixture's queue and returns it with a soft stop (ends Run's
// context, without waiting) and a wait for Run to return.
func (f *fixture) run(t *testing.T, cfg worker.Config, h worker.Handler) (*worker.Worker, context.CancelFunc, func()) {
	t.Helper()
	cfg.Queues = []string{f.queue}
	cfg.WorkerID = "test-go"
	cfg.PollWait = time.Second
	w, err := worker.New(f.conn, cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	wait := func() {
		once.Do(func() {
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(func() { cancel(); wait() })
	return w, cancel, wait
}

func (f *fixture) state(t *testing.T, id string) pb.TaskState {
	t.Helper()
	resp, err := f.admin.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: id})
	if err != nil {
		t.Fatalf("GetTask: %v", err)
	}
	return resp.GetTask().GetState()
}

func TestLeaseNextRunsEachTaskOnceLeasingThroughTheSettles(t *testing.T) {
	runsEachTaskOnce(t, false)
}

func TestDisableLeaseNextLeasesEveryTaskWithLease(t *testing.T) {
	runsEachTaskOnce(t, true)
}

// runsEachTaskOnce: concurrency 1 over 8 ready tasks, one failing for good.
func runsEachTaskOnce(t *testing.T, disable bool) {
	f := newFixture(t)
	var specs []*pb.TaskSpec
	for i := range 8 {
		specs = append(specs, &pb.TaskSpec{Payload: []byte(fmt.Sprint(i))})
	}
	ids := f.submit(t, specs...)
	var mu sync.Mutex
	seen := map[string]int{}
	w, cancel, wait := f.run(t, worker.Config{Concurrency: 1, DisableLeaseNext: disable},
		func(ctx context.Context, task *worker.Task) ([]byte, error) {
			mu.Lock()
			seen[string(task.GetPayload())]++
			mu.Unlock()
			if string(task.GetPayload()) == "3" { // a Fail carries lease_next too
				return nil, worker.Permanent(errors.New("bad input"))
			}
			return []byte("ok"), nil
		})
	for i, id := range ids {
		want := pb.TaskState_TASK_STATE_SUCCEEDED
		if i == 3 {
			want = pb.TaskState_TASK_STATE_DEAD
		}
		f.waitState(t, id, want)
	}
	cancel()
	wait()
	for i := range 8 {
		if n := seen[fmt.Sprint(i)]; n != 1 {
			t.Errorf("task %d ran %d times, want once", i, n)
		}
	}
	// Concurrency 1 over ready tasks: only the first needs a Lease.
	want := int64(len(ids) - 1)
	if disable {
		want = 0
	}
	if got := w.LeaseNextTasks(); got != want {
		t.Errorf("%d tasks came through lease_next, want %d", got, want)
	}
}

func TestStoppingMidStreamLeavesTheRestReady(t *testing.T) {
	f := newFixture(t)
	ids := f.submit(t, make10()...)
	var mu sync.Mutex
	var ran []string
	third, release := make(chan struct{}), make(chan struct{})
	_, cancel, wait := f.run(t, worker.Config{Concurrency: 1}, func(ctx context.Context, task *worker.Task) ([]byte, error) {
		mu.Lock()
		ran = append(ran, task.GetTaskId())
		n := len(ran)
		mu.Unlock()
		if n == 3 {
			close(third)
			<-release
		}
		return []byte("ok"), nil
	})
	select {
	case <-third:
	case <-time.After(15 * time.Second):
		t.Fatal("the third task never ran")
	}
	cancel() // while the third task runs: its Complete must not lease another
	close(release)
	wait()
	done := map[string]bool{}
	for _, id := range ran {
		if done[id] {
			t.Errorf("task %s ran twice", id)
		}
		done[id] = true
	}
	if len(ran) != 3 {
		t.Errorf("%d tasks ran, want 3", len(ran))
	}
	for _, id := range ids {
		want := pb.TaskState_TASK_STATE_READY
		if done[id] {
			want = pb.TaskState_TASK_STATE_SUCCEEDED
		}
		if got := f.state(t, id); got != want {
			t.Errorf("task %s is %v after the stop, want %v", id, got, want)
		}
	}
}

func make10() []*pb.TaskSpec {
	specs := make([]*pb.TaskSpec, 10)
	for i := range specs {
		specs[i] = &pb.TaskSpec{}
	}
	return specs
}
