// The conformance case worker_id_binding, for the Go client: README.md beside this file says what
// it does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

func init() { register("worker_id_binding", workerIDBinding) }

// workerIDBinding: a worker token bound to worker ids (TASKBROKER_WORKER_TOKEN, with
// --secure) leases under an allowed id, is refused under another with PERMISSION_DENIED,
// and a Worker under that id stops by itself.
func workerIDBinding(ctx context.Context, e *env, q string) error {
	id, err := submit(ctx, e, &pb.TaskSpec{Queue: q, Payload: []byte("bound")})
	if err != nil {
		return err
	}
	token := os.Getenv("TASKBROKER_WORKER_TOKEN")
	conn := e.conn
	if token != "" {
		bound, err := taskbroker.NewClient(os.Getenv("TASKBROKER_ADDR"), taskbroker.FromEnv(), taskbroker.WithToken(token))
		if err != nil {
			return err
		}
		defer bound.Close()
		conn = bound
	}
	broker := pb.NewBrokerServiceClient(conn)
	leaseAs := func(workerID string) (*pb.LeaseResponse, error) {
		return broker.Lease(ctx, &pb.LeaseRequest{
			WorkerId:      workerID,
			Queues:        []string{q},
			MaxTasks:      1,
			LeaseDuration: durationpb.New(30 * time.Second),
		})
	}
	allowed := workerID + "-bound-1"
	got, err := leaseAs(allowed)
	if err != nil {
		return fmt.Errorf("Lease as %s: %w", allowed, err)
	}
	if len(got.GetTasks()) != 1 || got.GetTasks()[0].GetTaskId() != id {
		return fmt.Errorf("Lease as %s returned %s, want %s", allowed, describe(got.GetTasks()), id)
	}
	if token != "" {
		_, err := leaseAs(workerID)
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "worker_id") {
			return fmt.Errorf("Lease as %s: %v, want PERMISSION_DENIED naming worker_id", workerID, err)
		}
	}
	lease := got.GetTasks()[0]
	if _, err := broker.Complete(ctx, &pb.CompleteRequest{TaskId: id, LeaseToken: lease.GetLeaseToken()}); err != nil {
		return fmt.Errorf("Complete: %w", err)
	}
	t, err := e.admin.GetTask(ctx, &pb.GetTaskRequest{TaskId: id})
	if err != nil {
		return fmt.Errorf("GetTask: %w", err)
	}
	if t.GetTask().GetState() != pb.TaskState_TASK_STATE_SUCCEEDED {
		return fmt.Errorf("the task is %v, want SUCCEEDED", t.GetTask().GetState())
	}
	if token == "" {
		return nil
	}
	nop := func(context.Context, *worker.Task) ([]byte, error) { return nil, nil }
	w, err := worker.New(conn, worker.Config{Queues: []string{q}, WorkerID: workerID, PollWait: time.Second, Logger: quiet}, nop)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	err = w.Run(runCtx)
	if runCtx.Err() != nil {
		return errors.New("the worker kept running")
	}
	var stopped *worker.StoppedError
	if !errors.As(err, &stopped) || status.Code(err) != codes.PermissionDenied {
		return fmt.Errorf("Worker as %s: Run returned %v, want a StoppedError with PermissionDenied", workerID, err)
	}
	return nil
}
