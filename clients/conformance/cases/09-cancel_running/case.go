// The conformance case cancel_running, for the Go client: README.md beside this file says what it
// does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"fmt"
	"time"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func init() { register("cancel_running", cancelRunning) }

func cancelRunning(ctx context.Context, e *env, q string) error {
	t, err := submitAndLease(ctx, e, &pb.TaskSpec{Queue: q}, 30*time.Second)
	if err != nil {
		return err
	}
	if _, err := e.admin.CancelTask(ctx, &pb.CancelTaskRequest{TaskId: t.GetTaskId()}); err != nil {
		return fmt.Errorf("CancelTask: %w", err)
	}
	hb, err := e.broker.Heartbeat(ctx, &pb.HeartbeatRequest{
		WorkerId: workerID,
		Leases:   []*pb.LeaseRef{{TaskId: t.GetTaskId(), LeaseToken: t.GetLeaseToken()}},
	})
	if err != nil {
		return fmt.Errorf("Heartbeat: %w", err)
	}
	if len(hb.GetLeases()) != 1 || !hb.GetLeases()[0].GetCancelRequested() || hb.GetLeases()[0].GetLost() {
		return fmt.Errorf("Heartbeat: %v, want one status with cancel_requested=true lost=false", hb.GetLeases())
	}
	resp, err := e.broker.Fail(ctx, &pb.FailRequest{TaskId: t.GetTaskId(), LeaseToken: t.GetLeaseToken(), ErrorMessage: "cancelled"})
	if err != nil {
		return fmt.Errorf("Fail: %w", err)
	}
	if resp.GetState() != pb.TaskState_TASK_STATE_CANCELLED {
		return fmt.Errorf("Fail: state %v, want CANCELLED", resp.GetState())
	}
	return nil
}
