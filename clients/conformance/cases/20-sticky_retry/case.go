// The conformance case sticky_retry, for the Go client: README.md beside this file says what it
// does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func init() { register("sticky_retry", stickyRetry) }

func stickyRetry(ctx context.Context, e *env, q string) error {
	spec := &pb.TaskSpec{
		Queue:  q,
		Retry:  &pb.RetryPolicy{MaxAttempts: 3, InitialBackoff: durationpb.New(0)},
		Sticky: taskbroker.SoftSticky(time.Minute),
	}
	if _, err := e.broker.Submit(ctx, &pb.SubmitRequest{Tasks: []*pb.TaskSpec{spec}}); err != nil {
		return fmt.Errorf("Submit: %w", err)
	}
	got, err := leaseAs(ctx, e, q, workerID, nil, 0)
	if err != nil {
		return err
	}
	if len(got) != 1 {
		return fmt.Errorf("leased %s, want 1 task", describe(got))
	}
	fail, err := e.broker.Fail(ctx, &pb.FailRequest{TaskId: got[0].GetTaskId(), LeaseToken: got[0].GetLeaseToken(), ErrorMessage: "boom"})
	if err != nil {
		return fmt.Errorf("Fail: %w", err)
	}
	if s := fail.GetState(); s != pb.TaskState_TASK_STATE_READY && s != pb.TaskState_TASK_STATE_SCHEDULED {
		return fmt.Errorf("Fail: state %s, want READY or SCHEDULED", s)
	}
	other := workerID + "-other"
	stolen, err := leaseAs(ctx, e, q, other, nil, 0)
	if err != nil {
		return err
	}
	if len(stolen) != 0 {
		return fmt.Errorf("%s leased the retry reserved for %s: %s", other, workerID, describe(stolen))
	}
	again, err := leaseAs(ctx, e, q, workerID, nil, 5*time.Second)
	if err != nil {
		return err
	}
	if len(again) != 1 || again[0].GetTaskId() != got[0].GetTaskId() || again[0].GetAttempt() != 2 {
		return fmt.Errorf("%s leased %s, want task %s with attempt 2", workerID, describe(again), got[0].GetTaskId())
	}
	return complete(ctx, e, again[0], nil)
}
