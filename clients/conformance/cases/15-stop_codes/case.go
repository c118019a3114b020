// The conformance case stop_codes, for the Go client: README.md beside this file says what it does
// and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it belongs
// to.

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

func init() { register("stop_codes", stopCodes) }

func stopCodes(ctx context.Context, e *env, q string) error {
	runUntilStopped := func(w *worker.Worker) error {
		runCtx, stop := context.WithTimeout(ctx, 20*time.Second)
		defer stop()
		err := w.Run(runCtx)
		if runCtx.Err() != nil {
			return errors.New("the worker kept running")
		}
		return err
	}
	check := func(what string, err error, want codes.Code) error {
		var stopped *worker.StoppedError
		if !errors.As(err, &stopped) || status.Code(err) != want {
			return fmt.Errorf("%s: Run returned %v, want a StoppedError with %v", what, err, want)
		}
		return nil
	}
	nop := func(context.Context, *worker.Task) ([]byte, error) { return nil, nil }
	w, err := newWorker(e, "has space", worker.Config{}, nop)
	if err != nil {
		return err
	}
	if err := check("bad queue", runUntilStopped(w), codes.InvalidArgument); err != nil {
		return err
	}
	if os.Getenv("TASKBROKER_TOKEN") == "" {
		return nil
	}
	conn, err := taskbroker.NewClient(os.Getenv("TASKBROKER_ADDR"), taskbroker.FromEnv(), taskbroker.WithToken("wrong-token-0123456789"))
	if err != nil {
		return err
	}
	defer conn.Close()
	w, err = worker.New(conn, worker.Config{Queues: []string{q}, PollWait: time.Second, Logger: quiet}, nop)
	if err != nil {
		return err
	}
	return check("wrong token", runUntilStopped(w), codes.Unauthenticated)
}
