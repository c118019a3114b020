// The conformance case dead_result, for the Go client: README.md beside this file says what it
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
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

func init() { register("dead_result", deadResult) }

// deadResult: a task whose handler fails permanently; waiting for it (Wait, then the typed
// reader) is the client's *TaskFailedError with the task's id, state DEAD and the handler's
// message.
func deadResult(ctx context.Context, e *env, q string) error {
	res, err := taskbroker.SubmitJSON(ctx, e.broker, q, "order-7")
	if err != nil {
		return fmt.Errorf("SubmitJSON: %w", err)
	}
	id := res.GetTaskId()
	mux := worker.NewMux()
	mux.Handle(q, func(ctx context.Context, t *worker.Task) ([]byte, error) {
		return nil, worker.Permanentf("no such order")
	})
	w, err := mux.Worker(e.conn, worker.Config{WorkerID: workerID, PollWait: time.Second})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	task, waitErr := taskbroker.Wait(waitCtx, e.admin, id)
	stop()
	if err := <-done; err != nil {
		return fmt.Errorf("Run: %w", err)
	}
	check := func(what string, err error) error {
		var failed *taskbroker.TaskFailedError
		if !errors.As(err, &failed) {
			return fmt.Errorf("%s answered %v, want a *TaskFailedError", what, errOrOK(err))
		}
		if failed.TaskID != id || failed.State != pb.TaskState_TASK_STATE_DEAD || failed.LastError != "no such order" {
			return fmt.Errorf("%s: TaskFailedError{%s, %v, %q}, want {%s, DEAD, \"no such order\"}",
				what, failed.TaskID, failed.State, failed.LastError, id)
		}
		return nil
	}
	if err := check("Wait", waitErr); err != nil {
		return err
	}
	_, err = taskbroker.ResultJSON[string](task)
	return check("ResultJSON", err)
}
