package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

// dependencyResults: B depends on A; the Worker completes A with "a-result" and B's handler
// sees that result on its task (dependency_results) and returns it.
func dependencyResults(ctx context.Context, e *env, q string) error {
	a, err := taskbroker.Submit(ctx, e.broker, &pb.TaskSpec{Queue: q, Payload: []byte("a")})
	if err != nil {
		return fmt.Errorf("Submit a: %w", err)
	}
	aID := a[0].GetTaskId()
	b, err := taskbroker.SubmitJSON(ctx, e.broker, q, "b", taskbroker.WithDependsOn(aID))
	if err != nil {
		return fmt.Errorf("SubmitJSON b: %w", err)
	}
	var mu sync.Mutex
	var seen map[string][]byte
	mux := worker.NewMux()
	mux.Handle(q, func(ctx context.Context, t *worker.Task) ([]byte, error) {
		if t.GetTaskId() == aID {
			return []byte("a-result"), nil
		}
		mu.Lock()
		seen = maps.Clone(t.GetDependencyResults())
		mu.Unlock()
		return t.GetDependencyResults()[aID], nil
	})
	w, err := mux.Worker(e.conn, worker.Config{WorkerID: workerID, PollWait: time.Second})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tb, waitErr := taskbroker.Wait(waitCtx, e.admin, b.GetTaskId())
	stop()
	if err := <-done; err != nil {
		return fmt.Errorf("Run: %w", err)
	}
	if waitErr != nil {
		return waitErr
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string][]byte{aID: []byte("a-result")}
	if !maps.EqualFunc(seen, want, func(x, y []byte) bool { return string(x) == string(y) }) {
		return fmt.Errorf("b's handler saw dependency_results %q, want %q", seen, want)
	}
	if tb, err = getTask(ctx, e, b.GetTaskId()); err != nil {
		return err
	}
	if tb.GetState() != pb.TaskState_TASK_STATE_SUCCEEDED || string(tb.GetResult()) != "a-result" {
		return fmt.Errorf("b is %v with result %q, want SUCCEEDED with a-result", tb.GetState(), tb.GetResult())
	}
	return nil
}

// rawBytes is a Serializer that sends a []byte payload as it is, so SubmitJSON's options
// (WithKey, WithDependsOnKeys, WithOnDuplicateKey...) carry the scenario's plain payloads.
type rawBytes struct{}

func (rawBytes) Encode(v any) ([]byte, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("rawBytes encodes []byte, not %T", v)
	}
	return b, nil
}

func (rawBytes) Decode(data []byte, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawBytes decodes into *[]byte, not %T", v)
	}
	*p = data
	return nil
}

// keysAndReplace: b depends on the key k-a before any task has it; a second submission of
// the key digest replaces the waiting first one; a's result reaches b's lease.
func keysAndReplace(ctx context.Context, e *env, q string) error {
	submit := func(step, payload string, opts ...taskbroker.SubmitOption) (*pb.SubmitResult, error) {
		opts = append(opts, taskbroker.WithSerializer(rawBytes{}))
		r, err := taskbroker.SubmitJSON(ctx, e.broker, q, []byte(payload), opts...)
		if err != nil {
			return nil, fmt.Errorf("Submit %s: %w", step, err)
		}
		return r, nil
	}
	b, err := submit("b", "b", taskbroker.WithDependsOnKeys(taskbroker.TaskKeyOf(q, "k-a")))
	if err != nil {
		return err
	}
	tb, err := getTask(ctx, e, b.GetTaskId())
	if err != nil {
		return err
	}
	if tb.GetState() != pb.TaskState_TASK_STATE_BLOCKED {
		return fmt.Errorf("b is %v, want BLOCKED", tb.GetState())
	}
	now := time.Now()
	first, err := submit("digest v1", "v1", taskbroker.WithKey("digest"), taskbroker.WithRunAt(now.Add(time.Hour)))
	if err != nil {
		return err
	}
	second, err := submit("digest v2", "v2", taskbroker.WithKey("digest"), taskbroker.WithRunAt(now),
		taskbroker.WithOnDuplicateKey(pb.DuplicateKeyPolicy_DUPLICATE_KEY_POLICY_REPLACE_WAITING))
	if err != nil {
		return err
	}
	if second.GetTaskId() != first.GetTaskId() || !second.GetDeduplicated() || !second.GetReplaced() {
		return fmt.Errorf("the second submit of digest answered %s (deduplicated %v, replaced %v), want %s with both true",
			second.GetTaskId(), second.GetDeduplicated(), second.GetReplaced(), first.GetTaskId())
	}
	d := first.GetTaskId()
	a, err := submit("a", "a", taskbroker.WithKey("k-a"))
	if err != nil {
		return err
	}
	aID := a.GetTaskId()
	got, err := lease(ctx, e, q, 10, 30*time.Second, 0)
	if err != nil {
		return err
	}
	ids := make([]string, 0, len(got))
	for _, t := range got {
		ids = append(ids, t.GetTaskId())
	}
	want := []string{aID, d}
	slices.Sort(ids)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		return fmt.Errorf("the first Lease returned %v, want exactly a %s and d %s", ids, aID, d)
	}
	for _, t := range got {
		result := []byte("a-result")
		if t.GetTaskId() == d {
			if string(t.GetPayload()) != "v2" {
				return fmt.Errorf("d was leased with payload %q, want v2", t.GetPayload())
			}
			result = nil
		}
		if err := complete(ctx, e, t, result); err != nil {
			return err
		}
	}
	if tb, err = getTask(ctx, e, b.GetTaskId()); err != nil {
		return err
	}
	if tb.GetState() != pb.TaskState_TASK_STATE_READY {
		return fmt.Errorf("after a's Complete b is %v, want READY", tb.GetState())
	}
	if got, err = lease(ctx, e, q, 10, 30*time.Second, 5*time.Second); err != nil {
		return err
	}
	if len(got) != 1 || got[0].GetTaskId() != b.GetTaskId() {
		return fmt.Errorf("the second Lease returned %s, want exactly b %s", describe(got), b.GetTaskId())
	}
	results := got[0].GetDependencyResults()
	if len(results) != 1 || string(results[aID]) != "a-result" {
		return fmt.Errorf("b was leased with dependency_results %q, want {%s: a-result}", results, aID)
	}
	return complete(ctx, e, got[0], nil)
}

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
