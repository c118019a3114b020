// The conformance case dependency_results, for the Go client: README.md beside this file says what
// it does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

func init() { register("dependency_results", dependencyResults) }

// dependencyResults: B depends on A; the Worker completes A with "a-result" and B's handler
// sees that result on its task (dependency_results) and returns it.
func dependencyResults(ctx context.Context, e *env, q string) error {
	a, err := taskbroker.Submit(ctx, e.broker, &pb.TaskSpec{Queue: q, Payload: []byte("a")})
	if err != nil {
		return fmt.Errorf("Submit a: %w", err)
	}
	aID := a[0].GetTaskId()
	b, err := taskbroker.SubmitJSON(ctx, e.broker, q, "b", taskbroker.WithDependsOn(aID))
	if err != nil {
		return fmt.Errorf("SubmitJSON b: %w", err)
	}
	var mu sync.Mutex
	var seen map[string][]byte
	mux := worker.NewMux()
	mux.Handle(q, func(ctx context.Context, t *worker.Task) ([]byte, error) {
		if t.GetTaskId() == aID {
			return []byte("a-result"), nil
		}
		mu.Lock()
		seen = maps.Clone(t.GetDependencyResults())
		mu.Unlock()
		return t.GetDependencyResults()[aID], nil
	})
	w, err := mux.Worker(e.conn, worker.Config{WorkerID: workerID, PollWait: time.Second})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tb, waitErr := taskbroker.Wait(waitCtx, e.admin, b.GetTaskId())
	stop()
	if err := <-done; err != nil {
		return fmt.Errorf("Run: %w", err)
	}
	if waitErr != nil {
		return waitErr
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string][]byte{aID: []byte("a-result")}
	if !maps.EqualFunc(seen, want, func(x, y []byte) bool { return string(x) == string(y) }) {
		return fmt.Errorf("b's handler saw dependency_results %q, want %q", seen, want)
	}
	if tb, err = getTask(ctx, e, b.GetTaskId()); err != nil {
		return err
	}
	if tb.GetState() != pb.TaskState_TASK_STATE_SUCCEEDED || string(tb.GetResult()) != "a-result" {
		return fmt.Errorf("b is %v with result %q, want SUCCEEDED with a-result", tb.GetState(), tb.GetResult())
	}
	return nil
}
