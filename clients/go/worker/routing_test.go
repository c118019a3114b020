package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

func TestPreferSameWorkerKeepsRetryAfter(t *testing.T) {
	base := errors.New("disk full")
	err := worker.PreferSameWorker(worker.RetryAfter(base, 3*time.Second))
	var r *worker.RetryableError
	if !errors.As(err, &r) || !r.PreferSameWorker || r.RetryAfter != 3*time.Second {
		t.Fatalf("PreferSameWorker(RetryAfter(err, 3s)) = %#v", r)
	}
	if !errors.Is(err, base) {
		t.Fatal("the wrapped error is lost")
	}
}

func TestTooManyLabelsAreRefused(t *testing.T) {
	labels := map[string]string{}
	for i := range worker.MaxLabels + 1 {
		labels[fmt.Sprint("k", i)] = "v"
	}
	_, err := worker.New(nil, worker.Config{Queues: []string{"q"}, Labels: labels},
		func(context.Context, *worker.Task) ([]byte, error) { return nil, nil })
	if err == nil {
		t.Fatal("New accepted 33 labels")
	}
}

// A labelled worker takes a task targeted at its labels; a handler error wrapped in
// PreferSameWorker sends prefer_same_worker and the retry comes back to this worker.
func TestLabelledWorkerTakesTargetedTaskAndItsRetry(t *testing.T) {
	f := newFixture(t)
	ids := f.submit(t, &pb.TaskSpec{
		Payload: []byte("x"),
		Target:  taskbroker.TargetLabels(map[string]string{"gpu": "a100"}),
		Retry:   &pb.RetryPolicy{MaxAttempts: 3, InitialBackoff: durationpb.New(0)},
	})
	var mu sync.Mutex
	var attempts []uint32
	f.start(t, worker.Config{Labels: map[string]string{"gpu": "a100", "region": "eu"}},
		func(ctx context.Context, task *worker.Task) ([]byte, error) {
			mu.Lock()
			attempts = append(attempts, task.GetAttempt())
			mu.Unlock()
			if task.GetAttempt() == 1 {
				return nil, worker.PreferSameWorker(errors.New("local files are here"))
			}
			return []byte("ok"), nil
		})
	f.waitState(t, ids[0], pb.TaskState_TASK_STATE_SUCCEEDED)
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(attempts) != "[1 2]" {
		t.Fatalf("attempts %v, want [1 2]", attempts)
	}
}

func TestFanoutSubmitReturnsEveryCopy(t *testing.T) {
	f := newFixture(t)
	resp, err := f.broker.Submit(context.Background(), &pb.SubmitRequest{Tasks: []*pb.TaskSpec{
		{Queue: f.queue, Fanout: taskbroker.Fanout(3, true)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.GetResults()[0]
	if len(r.GetCopyTaskIds()) != 3 || r.GetCopyTaskIds()[0] != r.GetTaskId() {
		t.Fatalf("copy_task_ids %v, task_id %s", r.GetCopyTaskIds(), r.GetTaskId())
	}
}
