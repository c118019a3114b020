// The conformance case idempotent_submit, for the Go client: README.md beside this file says what
// it does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"fmt"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func init() { register("idempotent_submit", idempotentSubmit) }

func idempotentSubmit(ctx context.Context, e *env, q string) error {
	var ids []string
	for i, wantDedup := range []bool{false, true} {
		resp, err := e.broker.Submit(ctx, &pb.SubmitRequest{Tasks: []*pb.TaskSpec{{Queue: q, Key: "order-42"}}})
		if err != nil {
			return fmt.Errorf("Submit #%d: %w", i+1, err)
		}
		if len(resp.GetResults()) != 1 {
			return fmt.Errorf("Submit #%d: %d results, want 1", i+1, len(resp.GetResults()))
		}
		r := resp.GetResults()[0]
		if r.GetDeduplicated() != wantDedup {
			return fmt.Errorf("Submit #%d: deduplicated=%v, want %v", i+1, r.GetDeduplicated(), wantDedup)
		}
		ids = append(ids, r.GetTaskId())
	}
	if ids[0] != ids[1] {
		return fmt.Errorf("task ids differ: %s then %s", ids[0], ids[1])
	}
	return nil
}
