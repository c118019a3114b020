package main

import (
	"context"
	"fmt"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func submitMany(ctx context.Context, e *env, specs ...*pb.TaskSpec) ([]string, error) {
	resp, err := e.broker.Submit(ctx, &pb.SubmitRequest{Tasks: specs})
	if err != nil {
		return nil, fmt.Errorf("Submit: %w", err)
	}
	ids := make([]string, len(resp.GetResults()))
	for i, r := range resp.GetResults() {
		ids[i] = r.GetTaskId()
	}
	return ids, nil
}
