// The conformance case submit_backpressure, for the Go client: README.md beside this file says
// what it does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package
// it belongs to.

package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func init() { register("submit_backpressure", submitBackpressure) }

// refusals wraps a BrokerServiceClient and closes refused when a Submit through it first
// answers RESOURCE_EXHAUSTED: the case waits for that before it makes room.
type refusals struct {
	pb.BrokerServiceClient
	once    sync.Once
	refused chan struct{}
}

func (r *refusals) Submit(ctx context.Context, req *pb.SubmitRequest, opts ...grpc.CallOption) (*pb.SubmitResponse, error) {
	resp, err := r.BrokerServiceClient.Submit(ctx, req, opts...)
	if status.Code(err) == codes.ResourceExhausted {
		r.once.Do(func() { close(r.refused) })
	}
	return resp, err
}

// submitBackpressure: a queue with max_pending 1 refuses a second task with
// RESOURCE_EXHAUSTED (RetryInfo, QuotaFailure) and stores nothing; the client's Submit waits
// the hinted delay and gets it in once the first task is done.
func submitBackpressure(ctx context.Context, e *env, q string) error {
	if _, err := e.admin.UpdateQueue(ctx, &pb.UpdateQueueRequest{
		Name:       q,
		Config:     &pb.QueueConfig{MaxPending: 1},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"max_pending"}},
	}); err != nil {
		return fmt.Errorf("UpdateQueue: %w", err)
	}
	if _, err := taskbroker.Submit(ctx, e.broker, &pb.TaskSpec{Queue: q, Payload: []byte("1")}); err != nil {
		return fmt.Errorf("Submit 1: %w", err)
	}
	_, err := e.broker.Submit(ctx, &pb.SubmitRequest{Tasks: []*pb.TaskSpec{{Queue: q, Payload: []byte("2")}}})
	if status.Code(err) != codes.ResourceExhausted {
		return fmt.Errorf("Submit 2 over max_pending answered %v, want RESOURCE_EXHAUSTED", errOrOK(err))
	}
	var retryInfo, quota bool
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		switch d.(type) {
		case *errdetails.RetryInfo:
			retryInfo = true
		case *errdetails.QuotaFailure:
			quota = true
		}
	}
	if !retryInfo || !quota {
		return fmt.Errorf("RESOURCE_EXHAUSTED details %v: RetryInfo %v, QuotaFailure %v; want both", st.Details(), retryInfo, quota)
	}
	list, err := e.admin.ListTasks(ctx, &pb.ListTasksRequest{Queue: q})
	if err != nil {
		return fmt.Errorf("ListTasks: %w", err)
	}
	if n := len(list.GetTasks()); n != 1 {
		return fmt.Errorf("the refused Submit left %d tasks, want 1", n)
	}

	watched := &refusals{BrokerServiceClient: e.broker, refused: make(chan struct{})}
	type outcome struct {
		results []*pb.SubmitResult
		err     error
	}
	submitted := make(chan outcome, 1)
	go func() {
		r, err := taskbroker.Submit(ctx, watched, &pb.TaskSpec{Queue: q, Payload: []byte("2")})
		submitted <- outcome{r, err}
	}()
	select {
	case <-watched.refused:
	case o := <-submitted:
		return fmt.Errorf("the helper's Submit returned (%v) before any refusal", errOrOK(o.err))
	case <-time.After(10 * time.Second):
		return errors.New("the helper's Submit was not refused within 10 s")
	}
	got, err := lease(ctx, e, q, 1, 30*time.Second, 0)
	if err != nil {
		return err
	}
	if len(got) != 1 || string(got[0].GetPayload()) != "1" {
		return fmt.Errorf("Lease returned %s, want task 1", describe(got))
	}
	if err := complete(ctx, e, got[0], nil); err != nil {
		return err
	}
	o := <-submitted
	if o.err != nil {
		return fmt.Errorf("the helper's Submit of task 2 failed: %w", o.err)
	}
	t2, err := getTask(ctx, e, o.results[0].GetTaskId())
	if err != nil {
		return err
	}
	if string(t2.GetPayload()) != "2" {
		return fmt.Errorf("task 2 has payload %q", t2.GetPayload())
	}
	return nil
}
