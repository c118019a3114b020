// The conformance case heartbeat_extends, for the Go client: README.md beside this file says what
// it does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func init() { register("heartbeat_extends", heartbeatExtends) }

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
