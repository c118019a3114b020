// The conformance case spec_defaults, for the Go client: README.md beside this file says what it
// does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskbroker/taskbroker/clients/go/worker"
)

func init() { register("spec_defaults", specDefaults) }

func specDefaults(_ context.Context, e *env, q string) error {
	w, err := worker.New(e.conn, worker.Config{Queues: []string{q}}, func(context.Context, *worker.Task) ([]byte, error) { return nil, nil })
	if err != nil {
		return err
	}
	got := w.Config()
	if got.Concurrency != 4 || got.PollWait != 10*time.Second || got.LeaseDuration != 30*time.Second ||
		worker.HeartbeatInterval(got.LeaseDuration) != 10*time.Second || got.StopTimeout != 30*time.Second {
		return fmt.Errorf("defaults %d %v %v %v %v, want 4 10s 30s 10s 30s", got.Concurrency, got.PollWait,
			got.LeaseDuration, worker.HeartbeatInterval(got.LeaseDuration), got.StopTimeout)
	}
	if c0, c10 := worker.BackoffCeiling(0), worker.BackoffCeiling(10); c0 != 200*time.Millisecond || c10 != 10*time.Second {
		return fmt.Errorf("backoff ceilings %v %v, want 200ms 10s", c0, c10)
	}
	seen := map[time.Duration]bool{}
	for range 50 {
		d := worker.Backoff(3)
		if d < 160*time.Millisecond || d > 1600*time.Millisecond {
			return fmt.Errorf("Backoff(3) = %v, outside [160ms, 1.6s]", d)
		}
		seen[d] = true
	}
	if len(seen) < 2 {
		return errors.New("Backoff(3) has no jitter")
	}
	for _, c := range []codes.Code{codes.Unauthenticated, codes.PermissionDenied, codes.InvalidArgument, codes.Unimplemented} {
		if !worker.StopsWorker(status.Error(c, "x")) {
			return fmt.Errorf("StopsWorker(%v) = false", c)
		}
	}
	if worker.StopsWorker(status.Error(codes.Unavailable, "x")) {
		return errors.New("StopsWorker(UNAVAILABLE) = true")
	}
	return nil
}
