// The conformance case stale_token, for the Go client: README.md beside this file says what it
// does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskbroker/taskbroker/clients/go/rpcerr"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func init() { register("stale_token", staleToken) }

func staleToken(ctx context.Context, e *env, q string) error {
	t, err := submitAndLease(ctx, e, &pb.TaskSpec{Queue: q}, 30*time.Second)
	if err != nil {
		return err
	}
	_, err = e.broker.Complete(ctx, &pb.CompleteRequest{TaskId: t.GetTaskId(), LeaseToken: "stale"})
	if status.Code(err) != codes.Aborted {
		return fmt.Errorf("Complete with stale token: %v, want ABORTED", errOrOK(err))
	}
	info := rpcerr.Info(err)
	if info == nil {
		return fmt.Errorf("Complete with stale token: ABORTED without a google.rpc.ErrorInfo detail (%v)", err)
	}
	if info.GetReason() != rpcerr.ReasonLeaseLost || info.GetDomain() != rpcerr.Domain {
		return fmt.Errorf("ErrorInfo reason %q domain %q, want %q and %q",
			info.GetReason(), info.GetDomain(), rpcerr.ReasonLeaseLost, rpcerr.Domain)
	}
	task, err := getTask(ctx, e, t.GetTaskId())
	if err != nil {
		return err
	}
	if task.GetState() != pb.TaskState_TASK_STATE_LEASED {
		return fmt.Errorf("GetTask after stale Complete: state %v, want LEASED", task.GetState())
	}
	return nil
}
