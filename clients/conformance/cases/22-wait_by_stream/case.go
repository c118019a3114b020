// The conformance case wait_by_stream, for the Go client: README.md beside this file says what it
// does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func init() { register("wait_by_stream", waitByStream) }

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
