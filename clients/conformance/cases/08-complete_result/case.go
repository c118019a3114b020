// The conformance case complete_result, for the Go client: README.md beside this file says what it
// does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"fmt"
	"time"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func init() { register("complete_result", completeResult) }

func completeResult(ctx context.Context, e *env, q string) error {
	t, err := submitAndLease(ctx, e, &pb.TaskSpec{Queue: q}, 30*time.Second)
	if err != nil {
		return err
	}
	for i := 1; i <= 2; i++ {
		if _, err := e.broker.Complete(ctx, &pb.CompleteRequest{
			TaskId: t.GetTaskId(), LeaseToken: t.GetLeaseToken(), Result: []byte("done:42"),
		}); err != nil {
			return fmt.Errorf("Complete #%d: %w", i, err)
		}
	}
	task, err := getTask(ctx, e, t.GetTaskId())
	if err != nil {
		return err
	}
	if task.GetState() != pb.TaskState_TASK_STATE_SUCCEEDED || string(task.GetResult()) != "done:42" {
		return fmt.Errorf("GetTask: state %v result %q, want SUCCEEDED and \"done:42\"", task.GetState(), task.GetResult())
	}
	return nil
}
