package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func lease(ctx context.Context, e *env, q string, n uint32, leaseFor, wait time.Duration) ([]*pb.LeasedTask, error) {
	resp, err := e.broker.Lease(ctx, &pb.LeaseRequest{
		WorkerId:      workerID,
		Queues:        []string{q},
		MaxTasks:      n,
		LeaseDuration: durationpb.New(leaseFor),
		Wait:          durationpb.New(wait),
	})
	if err != nil {
		return nil, fmt.Errorf("Lease: %w", err)
	}
	return resp.GetTasks(), nil
}

// submitAndLease submits spec and leases it at once; exactly one task must come back.
func submitAndLease(ctx context.Context, e *env, spec *pb.TaskSpec, leaseFor time.Duration) (*pb.LeasedTask, error) {
	sub, err := e.broker.Submit(ctx, &pb.SubmitRequest{Tasks: []*pb.TaskSpec{spec}})
	if err != nil {
		return nil, fmt.Errorf("Submit: %w", err)
	}
	tasks, err := lease(ctx, e, spec.GetQueue(), 1, leaseFor, 0)
	if err != nil {
		return nil, err
	}
	id := sub.GetResults()[0].GetTaskId()
	if len(tasks) != 1 || tasks[0].GetTaskId() != id {
		return nil, fmt.Errorf("Lease: %s, want task %s", describe(tasks), id)
	}
	return tasks[0], nil
}

func complete(ctx context.Context, e *env, t *pb.LeasedTask, result []byte) error {
	_, err := e.broker.Complete(ctx, &pb.CompleteRequest{TaskId: t.GetTaskId(), LeaseToken: t.GetLeaseToken(), Result: result})
	if err != nil {
		return fmt.Errorf("Complete %s: %w", t.GetTaskId(), err)
	}
	return nil
}

func getTask(ctx context.Context, e *env, id string) (*pb.Task, error) {
	resp, err := e.admin.GetTask(ctx, &pb.GetTaskRequest{TaskId: id})
	if err != nil {
		return nil, fmt.Errorf("GetTask: %w", err)
	}
	return resp.GetTask(), nil
}

func describe(tasks []*pb.LeasedTask) string {
	parts := make([]string, len(tasks))
	for i, t := range tasks {
		parts[i] = fmt.Sprintf("%s(attempt %d)", t.GetTaskId(), t.GetAttempt())
	}
	return fmt.Sprintf("%d tasks [%s]", len(tasks), strings.Join(parts, " "))
}

func errOrOK(err error) any {
	if err == nil {
		return "OK"
	}
	return err
}
