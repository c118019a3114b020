package main

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func leaseAs(ctx context.Context, e *env, q, worker string, labels map[string]string, wait time.Duration) ([]*pb.LeasedTask, error) {
	resp, err := e.broker.Lease(ctx, &pb.LeaseRequest{
		WorkerId:      worker,
		Queues:        []string{q},
		MaxTasks:      10,
		LeaseDuration: durationpb.New(30 * time.Second),
		Wait:          durationpb.New(wait),
		Labels:        labels,
	})
	if err != nil {
		return nil, fmt.Errorf("Lease as %s: %w", worker, err)
	}
	return resp.GetTasks(), nil
}
