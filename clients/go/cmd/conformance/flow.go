package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// The flow cases: dependencies on the broker stubs, and the client's Wait, which
// follows AdminService.WatchTasks.

func submitMany(ctx context.Context, e *env, specs ...*pb.TaskSpec) ([]string, error) {
	resp, err := e.broker.Submit(ctx, &pb.SubmitRequest{Tasks: specs})
	if err != nil {
		return nil, fmt.Errorf("Submit: %w", err)
	}
	ids := make([]string, len(resp.GetResults()))
	for i, r := range resp.GetResults() {
		ids[i] = r.GetTaskId()
	}
	return ids, nil
}

func dependency(ctx context.Context, e *env, q string) error {
	ids, err := submitMany(ctx, e,
		&pb.TaskSpec{Queue: q, Payload: []byte("a")},
		&pb.TaskSpec{Queue: q, Payload: []byte("b"), DependsOnIndex: []uint32{0}})
	if err != nil {
		return err
	}
	a, b := ids[0], ids[1]
	tb, err := getTask(ctx, e, b)
	if err != nil {
		return err
	}
	if tb.GetState() != pb.TaskState_TASK_STATE_BLOCKED || !slices.Equal(tb.GetDependsOn(), []string{a}) {
		return fmt.Errorf("b is %v depending on %v, want BLOCKED on [%s]", tb.GetState(), tb.GetDependsOn(), a)
	}
	got, err := lease(ctx, e, q, 10, 30*time.Second, 0)
	if err != nil {
		return err
	}
	if !slices.Equal(payloads(got), []string{"a"}) {
		return fmt.Errorf("first Lease returned %v, want [a]", payloads(got))
	}
	if err := complete(ctx, e, got[0], nil); err != nil {
		return err
	}
	if tb, err = getTask(ctx, e, b); err != nil {
		return err
	}
	if tb.GetState() != pb.TaskState_TASK_STATE_READY {
		return fmt.Errorf("after a completed b is %v, want READY", tb.GetState())
	}
	if got, err = lease(ctx, e, q, 10, 30*time.Second, 5*time.Second); err != nil {
		return err
	}
	if !slices.Equal(payloads(got), []string{"b"}) {
		return fmt.Errorf("second Lease returned %v, want [b]", payloads(got))
	}
	if err := complete(ctx, e, got[0], nil); err != nil {
		return err
	}

	cs, err := submitMany(ctx, e, &pb.TaskSpec{Queue: q, Payload: []byte("c")})
	if err != nil {
		return err
	}
	de, err := submitMany(ctx, e,
		&pb.TaskSpec{Queue: q, Payload: []byte("d"), DependsOn: cs},
		&pb.TaskSpec{Queue: q, Payload: []byte("e"), DependsOn: cs, RunIfDependencyFails: true})
	if err != nil {
		return err
	}
	if got, err = lease(ctx, e, q, 10, 30*time.Second, 0); err != nil {
		return err
	}
	if !slices.Equal(payloads(got), []string{"c"}) {
		return fmt.Errorf("third Lease returned %v, want [c] (d and e BLOCKED)", payloads(got))
	}
	if _, err := e.broker.Fail(ctx, &pb.FailRequest{
		TaskId: got[0].GetTaskId(), LeaseToken: got[0].GetLeaseToken(), ErrorMessage: "broken", NonRetryable: true,
	}); err != nil {
		return fmt.Errorf("Fail: %w", err)
	}
	td, err := getTask(ctx, e, de[0])
	if err != nil {
		return err
	}
	if td.GetState() != pb.TaskState_TASK_STATE_CANCELLED || td.GetCancelReason() != pb.CancelReason_CANCEL_REASON_DEPENDENCY_FAILED {
		return fmt.Errorf("d is %v (%v), want CANCELLED (CANCEL_REASON_DEPENDENCY_FAILED)", td.GetState(), td.GetCancelReason())
	}
	te, err := getTask(ctx, e, de[1])
	if err != nil {
		return err
	}
	if te.GetState() != pb.TaskState_TASK_STATE_READY {
		return fmt.Errorf("e (run_if_dependency_fails) is %v, want READY", te.GetState())
	}
	return nil
}

func waitByStream(ctx context.Context, e *env, q string) error {
	ws, err := submitMany(ctx, e, &pb.TaskSpec{Queue: q, Payload: []byte("w")})
	if err != nil {
		return err
	}
	w := ws[0]
	type outcome struct {
		task *pb.Task
		err  error
	}
	waited := make(chan outcome, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		t, err := taskbroker.Wait(wctx, e.admin, w)
		waited <- outcome{t, err}
	}()
	got, err := lease(ctx, e, q, 1, 30*time.Second, 10*time.Second)
	if err != nil {
		return err
	}
	if len(got) != 1 || got[0].GetTaskId() != w {
		return fmt.Errorf("Lease returned %s, want %s", describe(got), w)
	}
	if err := complete(ctx, e, got[0], []byte("waited")); err != nil {
		return err
	}
	o := <-waited
	if o.err != nil {
		return fmt.Errorf("Wait: %w", o.err)
	}
	if o.task.GetState() != pb.TaskState_TASK_STATE_SUCCEEDED || string(o.task.GetResult()) != "waited" {
		return fmt.Errorf("Wait returned %v with %q, want SUCCEEDED \"waited\"", o.task.GetState(), o.task.GetResult())
	}
	again, err := waitFor(ctx, e, w, 5*time.Second)
	if err != nil {
		return fmt.Errorf("second Wait: %w", err)
	}
	if again.GetState() != pb.TaskState_TASK_STATE_SUCCEEDED {
		return fmt.Errorf("second Wait returned %v", again.GetState())
	}
	xs, err := submitMany(ctx, e, &pb.TaskSpec{Queue: q, Payload: []byte("x")})
	if err != nil {
		return err
	}
	_, err = waitFor(ctx, e, xs[0], 500*time.Millisecond)
	var timeout *taskbroker.WaitTimeoutError
	if !errors.As(err, &timeout) || !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("Wait on x: %v, want a WaitTimeoutError", err)
	}
	tx, err := getTask(ctx, e, xs[0])
	if err != nil {
		return err
	}
	if tx.GetState() != pb.TaskState_TASK_STATE_READY {
		return fmt.Errorf("x is %v after the timeout, want READY", tx.GetState())
	}
	return nil
}

func waitFor(ctx context.Context, e *env, id string, timeout time.Duration) (*pb.Task, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return taskbroker.Wait(ctx, e.admin, id)
}
