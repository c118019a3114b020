// The conformance case non_retryable_fail, for the Go client: README.md beside this file says what
// it does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"fmt"
	"time"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func init() { register("non_retryable_fail", nonRetryableFail) }

func nonRetryableFail(ctx context.Context, e *env, q string) error {
	t, err := submitAndLease(ctx, e, &pb.TaskSpec{Queue: q}, 30*time.Second)
	if err != nil {
		return err
	}
	resp, err := e.broker.Fail(ctx, &pb.FailRequest{
		TaskId: t.GetTaskId(), LeaseToken: t.GetLeaseToken(), ErrorMessage: "bad input", NonRetryable: true,
	})
	if err != nil {
		return fmt.Errorf("Fail: %w", err)
	}
	if resp.GetState() != pb.TaskState_TASK_STATE_DEAD {
		return fmt.Errorf("Fail: state %v, want DEAD", resp.GetState())
	}
	task, err := getTask(ctx, e, t.GetTaskId())
	if err != nil {
		return err
	}
	if task.GetState() != pb.TaskState_TASK_STATE_DEAD || task.GetLastError() != "bad input" {
		return fmt.Errorf("GetTask: state %v last_error %q, want DEAD and \"bad input\"", task.GetState(), task.GetLastError())
	}
	return nil
}
