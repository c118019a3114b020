package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// The routing cases, on the broker stubs with the taskbroker routing builders.

func leaseAs(ctx context.Context, e *env, q, worker string, labels map[string]string, wait time.Duration) ([]*pb.LeasedTask, error) {
	resp, err := e.broker.Lease(ctx, &pb.LeaseRequest{
		WorkerId:      worker,
		Queues:        []string{q},
		MaxTasks:      10,
		LeaseDuration: durationpb.New(30 * time.Second),
		Wait:          durationpb.New(wait),
		Labels:        labels,
	})
	if err != nil {
		return nil, fmt.Errorf("Lease as %s: %w", worker, err)
	}
	return resp.GetTasks(), nil
}

func payloads(tasks []*pb.LeasedTask) []string {
	out := make([]string, len(tasks))
	for i, t := range tasks {
		out[i] = string(t.GetPayload())
	}
	return out
}

func targetedTask(ctx context.Context, e *env, q string) error {
	elsewhere := workerID + "-elsewhere"
	_, err := e.broker.Submit(ctx, &pb.SubmitRequest{Tasks: []*pb.TaskSpec{
		{Queue: q, Payload: []byte("a"), Target: taskbroker.TargetLabels(map[string]string{"gpu": "a100"})},
		{Queue: q, Payload: []byte("b"), Target: taskbroker.TargetWorker(elsewhere)},
	}})
	if err != nil {
		return fmt.Errorf("Submit: %w", err)
	}
	got, err := leaseAs(ctx, e, q, workerID, nil, 0)
	if err != nil {
		return err
	}
	if len(got) != 0 {
		return fmt.Errorf("a worker without labels leased %v", payloads(got))
	}
	carrying := map[string]string{"gpu": "a100", "region": "eu"}
	if got, err = leaseAs(ctx, e, q, workerID, carrying, 0); err != nil {
		return err
	}
	if !slices.Equal(payloads(got), []string{"a"}) {
		return fmt.Errorf("the labelled worker leased %v, want [a]", payloads(got))
	}
	if err := complete(ctx, e, got[0], nil); err != nil {
		return err
	}
	if got, err = leaseAs(ctx, e, q, workerID, carrying, 0); err != nil {
		return err
	}
	if len(got) != 0 {
		return fmt.Errorf("the labelled worker leased %v, a task targeted at another worker", payloads(got))
	}
	if got, err = leaseAs(ctx, e, q, elsewhere, nil, 0); err != nil {
		return err
	}
	if !slices.Equal(payloads(got), []string{"b"}) {
		return fmt.Errorf("%s leased %v, want [b]", elsewhere, payloads(got))
	}
	return complete(ctx, e, got[0], nil)
}

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
