// The conformance case deadline_cancels, for the Go client: README.md beside this file says what
// it does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

func init() { register("deadline_cancels", deadlineCancels) }

func deadlineCancels(ctx context.Context, e *env, q string) error {
	if _, err := submit(ctx, e, &pb.TaskSpec{Queue: q, Deadline: timestamppb.New(time.Now().Add(2 * time.Second))}); err != nil {
		return err
	}
	causes := make(chan error, 1)
	w, err := newWorker(e, q, worker.Config{}, func(hctx context.Context, _ *worker.Task) ([]byte, error) {
		select {
		case <-hctx.Done():
			causes <- context.Cause(hctx)
		case <-time.After(20 * time.Second):
			causes <- nil
		}
		return nil, errors.New("cancelled")
	})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { stop(); <-done }()
	select {
	case cause := <-causes:
		if !errors.Is(cause, worker.ErrDeadline) {
			return fmt.Errorf("handler cancelled with %v, want ErrDeadline", cause)
		}
		return nil
	case <-time.After(25 * time.Second):
		return errors.New("the handler never ran")
	}
}
