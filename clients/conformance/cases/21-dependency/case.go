// The conformance case dependency, for the Go client: README.md beside this file says what it does
// and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it belongs
// to.

package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func init() { register("dependency", dependency) }

func dependency(ctx context.Context, e *env, q string) error {
	ids, err := submitMany(ctx, e,
		&pb.TaskSpec{Queue: q, Payload: []byte("a")},
		&pb.TaskSpec{Queue: q, Payload: []byte("b"), DependsOnIndex: []uint32{0}})
	if err != nil {
		return err
	}
	a, b := ids[0], ids[1]
	tb, err := getTask(ctx, e, b)
	if err != nil {
		return err
	}
	if tb.GetState() != pb.TaskState_TASK_STATE_BLOCKED || !slices.Equal(tb.GetDependsOn(), []string{a}) {
		return fmt.Errorf("b is %v depending on %v, want BLOCKED on [%s]", tb.GetState(), tb.GetDependsOn(), a)
	}
	got, err := lease(ctx, e, q, 10, 30*time.Second, 0)
	if err != nil {
		return err
	}
	if !slices.Equal(payloads(got), []string{"a"}) {
		return fmt.Errorf("first Lease returned %v, want [a]", payloads(got))
	}
	if err := complete(ctx, e, got[0], nil); err != nil {
		return err
	}
	if tb, err = getTask(ctx, e, b); err != nil {
		return err
	}
	if tb.GetState() != pb.TaskState_TASK_STATE_READY {
		return fmt.Errorf("after a completed b is %v, want READY", tb.GetState())
	}
	if got, err = lease(ctx, e, q, 10, 30*time.Second, 5*time.Second); err != nil {
		return err
	}
	if !slices.Equal(payloads(got), []string{"b"}) {
		return fmt.Errorf("second Lease returned %v, want [b]", payloads(got))
	}
	if err := complete(ctx, e, got[0], nil); err != nil {
		return err
	}

	cs, err := submitMany(ctx, e, &pb.TaskSpec{Queue: q, Payload: []byte("c")})
	if err != nil {
		return err
	}
	de, err := submitMany(ctx, e,
		&pb.TaskSpec{Queue: q, Payload: []byte("d"), DependsOn: cs},
		&pb.TaskSpec{Queue: q, Payload: []byte("e"), DependsOn: cs, RunIfDependencyFails: true})
	if err != nil {
		return err
	}
	if got, err = lease(ctx, e, q, 10, 30*time.Second, 0); err != nil {
		return err
	}
	if !slices.Equal(payloads(got), []string{"c"}) {
		return fmt.Errorf("third Lease returned %v, want [c] (d and e BLOCKED)", payloads(got))
	}
	if _, err := e.broker.Fail(ctx, &pb.FailRequest{
		TaskId: got[0].GetTaskId(), LeaseToken: got[0].GetLeaseToken(), ErrorMessage: "broken", NonRetryable: true,
	}); err != nil {
		return fmt.Errorf("Fail: %w", err)
	}
	td, err := getTask(ctx, e, de[0])
	if err != nil {
		return err
	}
	if td.GetState() != pb.TaskState_TASK_STATE_CANCELLED || td.GetCancelReason() != pb.CancelReason_CANCEL_REASON_DEPENDENCY_FAILED {
		return fmt.Errorf("d is %v (%v), want CANCELLED (CANCEL_REASON_DEPENDENCY_FAILED)", td.GetState(), td.GetCancelReason())
	}
	te, err := getTask(ctx, e, de[1])
	if err != nil {
		return err
	}
	if te.GetState() != pb.TaskState_TASK_STATE_READY {
		return fmt.Errorf("e (run_if_dependency_fails) is %v, want READY", te.GetState())
	}
	return nil
}
