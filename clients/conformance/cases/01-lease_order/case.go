// The conformance case lease_order, for the Go client: README.md beside this file says what it
// does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func init() { register("lease_order", leaseOrder) }

func leaseOrder(ctx context.Context, e *env, q string) error {
	now := time.Now()
	at := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(d)) }
	specs := []*pb.TaskSpec{
		{Queue: q, Payload: []byte("a"), Priority: 0},
		{Queue: q, Payload: []byte("b"), Priority: 5},
		{Queue: q, Payload: []byte("c"), Priority: 5, Deadline: at(2 * time.Hour)},
		{Queue: q, Payload: []byte("d"), Priority: 5, Deadline: at(time.Hour)},
		{Queue: q, Payload: []byte("e"), Priority: -1},
		{Queue: q, Payload: []byte("f"), Priority: 10, RunAt: at(time.Hour)},
	}
	if _, err := e.broker.Submit(ctx, &pb.SubmitRequest{Tasks: specs}); err != nil {
		return fmt.Errorf("Submit: %w", err)
	}
	tasks, err := lease(ctx, e, q, 10, 30*time.Second, 0)
	if err != nil {
		return err
	}
	var got []string
	for _, t := range tasks {
		got = append(got, string(t.GetPayload()))
		if t.GetAttempt() != 1 {
			return fmt.Errorf("task %s: attempt %d, want 1", t.GetPayload(), t.GetAttempt())
		}
	}
	if strings.Join(got, ",") != "d,c,b,a,e" {
		return fmt.Errorf("leased payloads %v, want [d c b a e]", got)
	}
	for _, t := range tasks {
		if err := complete(ctx, e, t, nil); err != nil {
			return err
		}
	}
	return nil
}
