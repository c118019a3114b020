// The conformance case lease_next, for the Go client: README.md beside this file says what it does
// and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it belongs
// to.

package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func init() { register("lease_next", leaseNext) }

// leaseNext: Complete and Fail carry the next lease and answer with next_tasks.
func leaseNext(ctx context.Context, e *env, q string) error {
	ids, err := submitMany(ctx, e,
		&pb.TaskSpec{Queue: q, Payload: []byte("a"), Priority: 2},
		&pb.TaskSpec{Queue: q, Payload: []byte("b"), Priority: 1},
		&pb.TaskSpec{Queue: q, Payload: []byte("c"), Priority: 0})
	if err != nil {
		return err
	}
	got, err := lease(ctx, e, q, 1, 30*time.Second, 0)
	if err != nil {
		return err
	}
	if !slices.Equal(payloads(got), []string{"a"}) {
		return fmt.Errorf("Lease returned %v, want [a]", payloads(got))
	}
	next := func(n uint32) *pb.LeaseRequest {
		return &pb.LeaseRequest{WorkerId: workerID, Queues: []string{q}, MaxTasks: n, LeaseDuration: durationpb.New(30 * time.Second)}
	}
	done, err := e.broker.Complete(ctx, &pb.CompleteRequest{TaskId: got[0].GetTaskId(), LeaseToken: got[0].GetLeaseToken(), LeaseNext: next(1)})
	if err != nil {
		return fmt.Errorf("Complete a: %w", err)
	}
	b := done.GetNextTasks()
	if !slices.Equal(payloads(b), []string{"b"}) {
		return fmt.Errorf("Complete's next_tasks %v, want [b]", payloads(b))
	}
	if b[0].GetAttempt() != 1 || b[0].GetLeaseToken() == "" {
		return fmt.Errorf("b: attempt %d token %q, want attempt 1 with a lease token", b[0].GetAttempt(), b[0].GetLeaseToken())
	}
	if ta, err := getTask(ctx, e, ids[0]); err != nil {
		return err
	} else if ta.GetState() != pb.TaskState_TASK_STATE_SUCCEEDED {
		return fmt.Errorf("a is %v, want SUCCEEDED", ta.GetState())
	}
	failed, err := e.broker.Fail(ctx, &pb.FailRequest{
		TaskId: b[0].GetTaskId(), LeaseToken: b[0].GetLeaseToken(), ErrorMessage: "boom", NonRetryable: true, LeaseNext: next(1),
	})
	if err != nil {
		return fmt.Errorf("Fail b: %w", err)
	}
	c := failed.GetNextTasks()
	if failed.GetState() != pb.TaskState_TASK_STATE_DEAD {
		return fmt.Errorf("Fail: state %v, want DEAD", failed.GetState())
	}
	if !slices.Equal(payloads(c), []string{"c"}) {
		return fmt.Errorf("Fail's next_tasks %v, want [c]", payloads(c))
	}
	_, err = e.broker.Complete(ctx, &pb.CompleteRequest{TaskId: c[0].GetTaskId(), LeaseToken: c[0].GetLeaseToken(), LeaseNext: next(0)})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "lease_next.max_tasks") {
		return fmt.Errorf("Complete with lease_next.max_tasks 0: %v, want INVALID_ARGUMENT naming lease_next.max_tasks", errOrOK(err))
	}
	if tc, err := getTask(ctx, e, ids[2]); err != nil {
		return err
	} else if tc.GetState() != pb.TaskState_TASK_STATE_LEASED {
		return fmt.Errorf("c is %v after the refused Complete, want LEASED", tc.GetState())
	}
	last, err := e.broker.Complete(ctx, &pb.CompleteRequest{TaskId: c[0].GetTaskId(), LeaseToken: c[0].GetLeaseToken(), LeaseNext: next(1)})
	if err != nil {
		return fmt.Errorf("Complete c: %w", err)
	}
	if len(last.GetNextTasks()) != 0 {
		return fmt.Errorf("the last Complete's next_tasks %v, want none", payloads(last.GetNextTasks()))
	}
	if tc, err := getTask(ctx, e, ids[2]); err != nil {
		return err
	} else if tc.GetState() != pb.TaskState_TASK_STATE_SUCCEEDED {
		return fmt.Errorf("c is %v, want SUCCEEDED", tc.GetState())
	}
	return nil
}
