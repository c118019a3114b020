// The conformance case targeted_task, for the Go client: README.md beside this file says what it
// does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"fmt"
	"slices"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func init() { register("targeted_task", targetedTask) }

func payloads(tasks []*pb.LeasedTask) []string {
	out := make([]string, len(tasks))
	for i, t := range tasks {
		out[i] = string(t.GetPayload())
	}
	return out
}

func targetedTask(ctx context.Context, e *env, q string) error {
	elsewhere := workerID + "-elsewhere"
	_, err := e.broker.Submit(ctx, &pb.SubmitRequest{Tasks: []*pb.TaskSpec{
		{Queue: q, Payload: []byte("a"), Target: taskbroker.TargetLabels(map[string]string{"gpu": "a100"})},
		{Queue: q, Payload: []byte("b"), Target: taskbroker.TargetWorker(elsewhere)},
	}})
	if err != nil {
		return fmt.Errorf("Submit: %w", err)
	}
	got, err := leaseAs(ctx, e, q, workerID, nil, 0)
	if err != nil {
		return err
	}
	if len(got) != 0 {
		return fmt.Errorf("a worker without labels leased %v", payloads(got))
	}
	carrying := map[string]string{"gpu": "a100", "region": "eu"}
	if got, err = leaseAs(ctx, e, q, workerID, carrying, 0); err != nil {
		return err
	}
	if !slices.Equal(payloads(got), []string{"a"}) {
		return fmt.Errorf("the labelled worker leased %v, want [a]", payloads(got))
	}
	if err := complete(ctx, e, got[0], nil); err != nil {
		return err
	}
	if got, err = leaseAs(ctx, e, q, workerID, carrying, 0); err != nil {
		return err
	}
	if len(got) != 0 {
		return fmt.Errorf("the labelled worker leased %v, a task targeted at another worker", payloads(got))
	}
	if got, err = leaseAs(ctx, e, q, elsewhere, nil, 0); err != nil {
		return err
	}
	if !slices.Equal(payloads(got), []string{"b"}) {
		return fmt.Errorf("%s leased %v, want [b]", elsewhere, payloads(got))
	}
	return complete(ctx, e, got[0], nil)
}
