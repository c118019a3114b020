// The conformance case checkpoint_handover, for the Go client: README.md beside this file says
// what it does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package
// it belongs to.

package main

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func init() { register("checkpoint_handover", checkpointHandover) }

func checkpointHandover(ctx context.Context, e *env, q string) error {
	spec := &pb.TaskSpec{Queue: q, Retry: &pb.RetryPolicy{InitialBackoff: durationpb.New(0)}}
	first, err := submitAndLease(ctx, e, spec, time.Second)
	if err != nil {
		return err
	}
	if _, err := e.broker.Checkpoint(ctx, &pb.CheckpointRequest{
		TaskId: first.GetTaskId(), LeaseToken: first.GetLeaseToken(), Checkpoint: []byte("step-3"),
	}); err != nil {
		return fmt.Errorf("Checkpoint: %w", err)
	}
	tasks, err := lease(ctx, e, q, 1, 30*time.Second, 15*time.Second)
	if err != nil {
		return err
	}
	if len(tasks) != 1 {
		return fmt.Errorf("second Lease (wait 15s) returned %d tasks, want 1", len(tasks))
	}
	second := tasks[0]
	switch {
	case second.GetTaskId() != first.GetTaskId():
		return fmt.Errorf("second Lease returned task %s, want %s", second.GetTaskId(), first.GetTaskId())
	case second.GetAttempt() != 2:
		return fmt.Errorf("second attempt is %d, want 2", second.GetAttempt())
	case !second.GetHasCheckpoint() || string(second.GetCheckpoint()) != "step-3":
		return fmt.Errorf("has_checkpoint=%v checkpoint=%q, want true and \"step-3\"",
			second.GetHasCheckpoint(), second.GetCheckpoint())
	case second.GetFencingToken() <= first.GetFencingToken():
		return fmt.Errorf("fencing_token %d is not greater than the first %d",
			second.GetFencingToken(), first.GetFencingToken())
	}
	return complete(ctx, e, second, nil)
}
