// The conformance case retryable_fail, for the Go client: README.md beside this file says what it
// does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func init() { register("retryable_fail", retryableFail) }

func retryableFail(ctx context.Context, e *env, q string) error {
	spec := &pb.TaskSpec{Queue: q, Retry: &pb.RetryPolicy{MaxAttempts: 3, InitialBackoff: durationpb.New(0)}}
	t, err := submitAndLease(ctx, e, spec, 30*time.Second)
	if err != nil {
		return err
	}
	resp, err := e.broker.Fail(ctx, &pb.FailRequest{TaskId: t.GetTaskId(), LeaseToken: t.GetLeaseToken(), ErrorMessage: "boom"})
	if err != nil {
		return fmt.Errorf("Fail: %w", err)
	}
	if s := resp.GetState(); s != pb.TaskState_TASK_STATE_READY && s != pb.TaskState_TASK_STATE_SCHEDULED {
		return fmt.Errorf("Fail: state %v, want READY or SCHEDULED", s)
	}
	if resp.GetNextRunAt() == nil {
		return fmt.Errorf("Fail: next_run_at is unset")
	}
	tasks, err := lease(ctx, e, q, 1, 30*time.Second, 5*time.Second)
	if err != nil {
		return err
	}
	if len(tasks) != 1 || tasks[0].GetTaskId() != t.GetTaskId() || tasks[0].GetAttempt() != 2 {
		return fmt.Errorf("second Lease: %s, want task %s with attempt 2", describe(tasks), t.GetTaskId())
	}
	return complete(ctx, e, tasks[0], nil)
}
