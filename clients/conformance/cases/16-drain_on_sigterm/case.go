// The conformance case drain_on_sigterm, for the Go client: README.md beside this file says what
// it does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

func init() { register("drain_on_sigterm", drainOnSigterm) }

func drainOnSigterm(ctx context.Context, e *env, q string) error {
	a, err := submit(ctx, e, &pb.TaskSpec{Queue: q, Payload: []byte("a")})
	if err != nil {
		return err
	}
	running, release := make(chan struct{}), make(chan struct{})
	w, err := newWorker(e, q, worker.Config{Concurrency: 1}, func(context.Context, *worker.Task) ([]byte, error) {
		close(running)
		<-release
		return []byte("done"), nil
	})
	if err != nil {
		return err
	}
	// The idiom of docs/client-spec.md: SIGTERM ends Run's context.
	sigCtx, stopSignals := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stopSignals()
	done := make(chan error, 1)
	go func() { done <- w.Run(sigCtx) }()
	select {
	case <-running:
	case <-time.After(20 * time.Second):
		return errors.New("the handler never ran")
	}
	b, err := submit(ctx, e, &pb.TaskSpec{Queue: q, Payload: []byte("b")})
	if err != nil {
		return err
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		return err
	}
	<-sigCtx.Done()
	close(release)
	if err := <-done; err != nil {
		return fmt.Errorf("Run returned %v after SIGTERM, want nil", err)
	}
	ta, err := getTask(ctx, e, a)
	if err != nil {
		return err
	}
	tb, err := getTask(ctx, e, b)
	if err != nil {
		return err
	}
	if ta.GetState() != pb.TaskState_TASK_STATE_SUCCEEDED || tb.GetState() != pb.TaskState_TASK_STATE_READY {
		return fmt.Errorf("a %v, b %v; want SUCCEEDED, READY", ta.GetState(), tb.GetState())
	}
	return nil
}
