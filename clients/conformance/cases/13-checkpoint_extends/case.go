// The conformance case checkpoint_extends, for the Go client: README.md beside this file says what
// it does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"fmt"
	"time"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

func init() { register("checkpoint_extends", checkpointExtends) }

// waitState polls GetTask until the task is in want or ctx ends.
func waitState(ctx context.Context, e *env, id string, want pb.TaskState) (*pb.Task, error) {
	for {
		t, err := getTask(ctx, e, id)
		if err != nil || t.GetState() == want {
			return t, err
		}
		select {
		case <-ctx.Done():
			return t, nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func checkpointExtends(ctx context.Context, e *env, q string) error {
	id, err := submit(ctx, e, &pb.TaskSpec{Queue: q})
	if err != nil {
		return err
	}
	var leased, after time.Time
	w, err := newWorker(e, q, worker.Config{LeaseDuration: 4 * time.Second}, func(hctx context.Context, t *worker.Task) ([]byte, error) {
		leased = t.LeaseExpiry()
		time.Sleep(100 * time.Millisecond)
		if err := t.Checkpoint(hctx, []byte("half")); err != nil {
			return nil, err
		}
		after = t.LeaseExpiry()
		return []byte("ok"), nil
	})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	task, err := waitState(ctx, e, id, pb.TaskState_TASK_STATE_SUCCEEDED)
	stop()
	<-done
	if err != nil {
		return err
	}
	if task.GetState() != pb.TaskState_TASK_STATE_SUCCEEDED {
		return fmt.Errorf("state %v, want SUCCEEDED", task.GetState())
	}
	if !after.After(leased) {
		return fmt.Errorf("expiry %v -> %v: the checkpoint did not extend the lease", leased, after)
	}
	return nil
}
