package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/taskbroker/taskbroker/clients/go/rpcerr"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func leaseOrder(ctx context.Context, e *env, q string) error {
	now := time.Now()
	at := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(d)) }
	specs := []*pb.TaskSpec{
		{Queue: q, Payload: []byte("a"), Priority: 0},
		{Queue: q, Payload: []byte("b"), Priority: 5},
		{Queue: q, Payload: []byte("c"), Priority: 5, Deadline: at(2 * time.Hour)},
		{Queue: q, Payload: []byte("d"), Priority: 5, Deadline: at(time.Hour)},
		{Queue: q, Payload: []byte("e"), Priority: -1},
		{Queue: q, Payload: []byte("f"), Priority: 10, RunAt: at(time.Hour)},
	}
	if _, err := e.broker.Submit(ctx, &pb.SubmitRequest{Tasks: specs}); err != nil {
		return fmt.Errorf("Submit: %w", err)
	}
	tasks, err := lease(ctx, e, q, 10, 30*time.Second, 0)
	if err != nil {
		return err
	}
	var got []string
	for _, t := range tasks {
		got = append(got, string(t.GetPayload()))
		if t.GetAttempt() != 1 {
			return fmt.Errorf("task %s: attempt %d, want 1", t.GetPayload(), t.GetAttempt())
		}
	}
	if strings.Join(got, ",") != "d,c,b,a,e" {
		return fmt.Errorf("leased payloads %v, want [d c b a e]", got)
	}
	for _, t := range tasks {
		if err := complete(ctx, e, t, nil); err != nil {
			return err
		}
	}
	return nil
}

func idempotentSubmit(ctx context.Context, e *env, q string) error {
	var ids []string
	for i, wantDedup := range []bool{false, true} {
		resp, err := e.broker.Submit(ctx, &pb.SubmitRequest{Tasks: []*pb.TaskSpec{{Queue: q, Key: "order-42"}}})
		if err != nil {
			return fmt.Errorf("Submit #%d: %w", i+1, err)
		}
		if len(resp.GetResults()) != 1 {
			return fmt.Errorf("Submit #%d: %d results, want 1", i+1, len(resp.GetResults()))
		}
		r := resp.GetResults()[0]
		if r.GetDeduplicated() != wantDedup {
			return fmt.Errorf("Submit #%d: deduplicated=%v, want %v", i+1, r.GetDeduplicated(), wantDedup)
		}
		ids = append(ids, r.GetTaskId())
	}
	if ids[0] != ids[1] {
		return fmt.Errorf("task ids differ: %s then %s", ids[0], ids[1])
	}
	return nil
}

func heartbeatExtends(ctx context.Context, e *env, q string) error {
	t, err := submitAndLease(ctx, e, &pb.TaskSpec{Queue: q}, 5*time.Second)
	if err != nil {
		return err
	}
	resp, err := e.broker.Heartbeat(ctx, &pb.HeartbeatRequest{
		WorkerId: workerID,
		Leases:   []*pb.LeaseRef{{TaskId: t.GetTaskId(), LeaseToken: t.GetLeaseToken()}},
		ExtendBy: durationpb.New(60 * time.Second),
	})
	if err != nil {
		return fmt.Errorf("Heartbeat: %w", err)
	}
	if n := len(resp.GetLeases()); n != 1 {
		return fmt.Errorf("Heartbeat: %d statuses, want 1", n)
	}
	st := resp.GetLeases()[0]
	if st.GetLost() {
		return fmt.Errorf("Heartbeat: lost=true, want false")
	}
	before, after := t.GetLeaseExpiresAt().AsTime(), st.GetLeaseExpiresAt().AsTime()
	if gained := after.Sub(before); gained < 30*time.Second {
		return fmt.Errorf("lease_expires_at moved by %v (from %v to %v), want >= 30s", gained, before, after)
	}

	resp, err = e.broker.Heartbeat(ctx, &pb.HeartbeatRequest{
		WorkerId: workerID,
		Leases:   []*pb.LeaseRef{{TaskId: t.GetTaskId(), LeaseToken: "stale"}},
	})
	if err != nil {
		return fmt.Errorf("Heartbeat with stale token: %w", err)
	}
	if len(resp.GetLeases()) != 1 || !resp.GetLeases()[0].GetLost() {
		return fmt.Errorf("Heartbeat with stale token: %v, want one status with lost=true", resp.GetLeases())
	}
	return nil
}

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

func staleToken(ctx context.Context, e *env, q string) error {
	t, err := submitAndLease(ctx, e, &pb.TaskSpec{Queue: q}, 30*time.Second)
	if err != nil {
		return err
	}
	_, err = e.broker.Complete(ctx, &pb.CompleteRequest{TaskId: t.GetTaskId(), LeaseToken: "stale"})
	if status.Code(err) != codes.Aborted {
		return fmt.Errorf("Complete with stale token: %v, want ABORTED", errOrOK(err))
	}
	info := rpcerr.Info(err)
	if info == nil {
		return fmt.Errorf("Complete with stale token: ABORTED without a google.rpc.ErrorInfo detail (%v)", err)
	}
	if info.GetReason() != rpcerr.ReasonLeaseLost || info.GetDomain() != rpcerr.Domain {
		return fmt.Errorf("ErrorInfo reason %q domain %q, want %q and %q",
			info.GetReason(), info.GetDomain(), rpcerr.ReasonLeaseLost, rpcerr.Domain)
	}
	task, err := getTask(ctx, e, t.GetTaskId())
	if err != nil {
		return err
	}
	if task.GetState() != pb.TaskState_TASK_STATE_LEASED {
		return fmt.Errorf("GetTask after stale Complete: state %v, want LEASED", task.GetState())
	}
	return nil
}

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

func badInput(ctx context.Context, e *env, _ string) error {
	_, err := e.broker.Submit(ctx, &pb.SubmitRequest{Tasks: []*pb.TaskSpec{{Queue: "has space"}}})
	if status.Code(err) != codes.InvalidArgument {
		return fmt.Errorf("Submit queue \"has space\": %v, want INVALID_ARGUMENT", errOrOK(err))
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "tasks[0].queue") {
		return fmt.Errorf("INVALID_ARGUMENT message %q does not name tasks[0].queue", msg)
	}
	return nil
}
