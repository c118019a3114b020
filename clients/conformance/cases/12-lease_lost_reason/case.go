// The conformance case lease_lost_reason, for the Go client: README.md beside this file says what
// it does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskbroker/taskbroker/clients/go/rpcerr"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func init() { register("lease_lost_reason", leaseLostReason) }

func leaseLostReason(ctx context.Context, e *env, q string) error {
	t, err := submitAndLease(ctx, e, &pb.TaskSpec{Queue: q}, 30*time.Second)
	if err != nil {
		return err
	}
	_, err = e.broker.Complete(ctx, &pb.CompleteRequest{TaskId: t.GetTaskId(), LeaseToken: "stale"})
	if !rpcerr.IsLeaseLost(err) {
		return fmt.Errorf("IsLeaseLost false for the broker's answer %v", err)
	}
	if rpcerr.IsLeaseLost(status.Error(codes.Aborted, "aborted for another reason")) {
		return errors.New("IsLeaseLost true for a bare ABORTED")
	}
	return nil
}
