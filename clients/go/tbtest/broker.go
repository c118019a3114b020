package tbtest

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

// Broker is an in-process fake of the broker and a worker together. It is a
// grpc.ClientConnInterface: pass it to pb.NewBrokerServiceClient and pb.NewAdminServiceClient
// (or use Broker() and Admin()), then taskbroker.Submit, SubmitJSON, Wait, WaitAll and
// SubmitAndWait work on it as on a real connection. Submit runs each new task's handler at
// once, in the caller's goroutine, retrying as the broker would (up to max_attempts, 3 by
// default, 1 for at_most_once; a permanent error ends it; no backoff, run_at not waited for),
// so the task is finished when Submit returns. A task of a queue with no handler stays READY
// (Wait then runs until its context ends); RunPending runs it once a handler is registered.
// Keys deduplicate as on the broker. Other RPCs answer UNIMPLEMENTED.
type Broker struct {
	mu       sync.Mutex
	handlers map[string]worker.Handler
	mws      []worker.Middleware
	tasks    map[string]*pb.Task
	order    []string
	outcomes map[string][]Outcome
}

// NewBroker returns an empty fake broker.
func NewBroker() *Broker {
	return &Broker{handlers: map[string]worker.Handler{}, tasks: map[string]*pb.Task{}, outcomes: map[string][]Outcome{}}
}

// Handle registers h for queue, as worker.Mux.Handle.
func (b *Broker) Handle(queue string, h worker.Handler) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.handlers[queue] = h
}

// HandleMux registers every handler of m (the Mux a program builds its worker from).
func (b *Broker) HandleMux(m *worker.Mux) {
	for _, q := range m.Queues() {
		b.Handle(q, m.Lookup(q))
	}
}

// Use adds middleware around every handler, the first outermost (as Config.Middleware).
func (b *Broker) Use(mws ...worker.Middleware) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mws = append(b.mws, mws...)
}

// Broker is a BrokerService client on the fake.
func (b *Broker) Broker() pb.BrokerServiceClient { return pb.NewBrokerServiceClient(b) }

// Admin is an AdminService client on the fake.
func (b *Broker) Admin() pb.AdminServiceClient { return pb.NewAdminServiceClient(b) }

// Task is the task as the fake holds it, nil when there is none.
func (b *Broker) Task(id string) *pb.Task {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.tasks[id]; t != nil {
		return proto.Clone(t).(*pb.Task)
	}
	return nil
}

// Tasks are every task submitted, in order.
func (b *Broker) Tasks() []*pb.Task {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*pb.Task, 0, len(b.order))
	for _, id := range b.order {
		out = append(out, proto.Clone(b.tasks[id]).(*pb.Task))
	}
	return out
}

// Outcomes are the task's attempts' outcomes, in order.
func (b *Broker) Outcomes(id string) []Outcome {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Outcome(nil), b.outcomes[id]...)
}

// RunPending runs every READY task whose queue has a handler now; how many ran.
func (b *Broker) RunPending(ctx context.Context) int {
	b.mu.Lock()
	var ready []string
	for _, id := range b.order {
		if t := b.tasks[id]; t.GetState() == pb.TaskState_TASK_STATE_READY && b.handlers[t.GetQueue()] != nil {
			ready = append(ready, id)
		}
	}
	b.mu.Unlock()
	for _, id := range ready {
		b.run(ctx, id)
	}
	return len(ready)
}

// Invoke answers Submit and GetTask; anything else is UNIMPLEMENTED.
func (b *Broker) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	var resp proto.Message
	var err error
	switch method {
	case pb.BrokerService_Submit_FullMethodName:
		resp, err = b.submit(ctx, args.(*pb.SubmitRequest))
	case pb.AdminService_GetTask_FullMethodName:
		id := args.(*pb.GetTaskRequest).GetTaskId()
		t := b.Task(id)
		if t == nil {
			return status.Errorf(codes.NotFound, "task %s not found", id)
		}
		resp = &pb.GetTaskResponse{Task: t}
	default:
		return status.Errorf(codes.Unimplemented, "tbtest: the fake broker has no %s", method)
	}
	if err != nil {
		return err
	}
	proto.Merge(reply.(proto.Message), resp)
	return nil
}

// NewStream opens WatchTasks, on which no event ever comes: every task the fake runs is
// finished when its Submit returns, which the waiter reads after opening the stream.
func (b *Broker) NewStream(ctx context.Context, _ *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	if method != pb.AdminService_WatchTasks_FullMethodName {
		return nil, status.Errorf(codes.Unimplemented, "tbtest: the fake broker has no %s", method)
	}
	return &silentStream{ctx: ctx}, nil
}

func (b *Broker) submit(ctx context.Context, req *pb.SubmitRequest) (*pb.SubmitResponse, error) {
	if n := len(req.GetTasks()); n == 0 || n > 1000 {
		return nil, status.Errorf(codes.InvalidArgument, "a Submit carries 1 to 1000 tasks, not %d", n)
	}
	for i, s := range req.GetTasks() {
		if s.GetQueue() == "" {
			return nil, status.Errorf(codes.InvalidArgument, "tasks[%d]: queue is required", i)
		}
	}
	resp := &pb.SubmitResponse{}
	var created []string
	b.mu.Lock()
	for _, s := range req.GetTasks() {
		if id := b.byKey(s.GetQueue(), s.GetKey()); id != "" {
			resp.Results = append(resp.Results, &pb.SubmitResult{TaskId: id, Deduplicated: true})
			continue
		}
		maxAttempts := s.GetRetry().GetMaxAttempts()
		if maxAttempts == 0 {
			maxAttempts = DefaultMaxAttempts
		}
		if s.GetAtMostOnce() {
			maxAttempts = 1
		}
		deps := append([]string(nil), s.GetDependsOn()...)
		for _, i := range s.GetDependsOnIndex() {
			if int(i) < len(resp.Results) {
				deps = append(deps, resp.Results[i].GetTaskId())
			}
		}
		t := &pb.Task{
			Id: newID(), Queue: s.GetQueue(), Payload: s.GetPayload(), Key: s.GetKey(), Priority: s.GetPriority(),
			Metadata: s.GetMetadata(), State: pb.TaskState_TASK_STATE_READY, MaxAttempts: maxAttempts,
			CreatedAt: timestamppb.Now(), UpdatedAt: timestamppb.Now(), Retry: s.GetRetry(),
			ConcurrencyKey: s.GetConcurrencyKey(), Bucket: s.GetBucket(), DependsOn: deps,
			RunIfDependencyFails: s.GetRunIfDependencyFails(), AtMostOnce: s.GetAtMostOnce(), Deadline: s.GetDeadline(),
		}
		if s.Checkpoint != nil {
			// The first attempt starts from it, as on a broker.
			t.Checkpoint, t.HasCheckpoint = s.GetCheckpoint(), true
		}
		b.tasks[t.Id] = t
		b.order = append(b.order, t.Id)
		created = append(created, t.Id)
		resp.Results = append(resp.Results, &pb.SubmitResult{TaskId: t.Id})
	}
	b.mu.Unlock()
	for _, id := range created {
		b.run(ctx, id)
	}
	return resp, nil
}

// byKey is the id of the task of queue with key, "" when there is none (or no key).
func (b *Broker) byKey(queue, key string) string {
	if key == "" {
		return ""
	}
	for _, id := range b.order {
		if t := b.tasks[id]; t.GetQueue() == queue && t.GetKey() == key {
			return id
		}
	}
	return ""
}

// run runs the task's attempts until it is finished (or cannot run: no handler).
func (b *Broker) run(ctx context.Context, id string) {
	for {
		b.mu.Lock()
		t := b.tasks[id]
		h := b.handlers[t.GetQueue()]
		mws := append([]worker.Middleware(nil), b.mws...)
		if h == nil || t.GetState() != pb.TaskState_TASK_STATE_READY {
			b.mu.Unlock()
			return
		}
		results, failed := b.dependencyResults(t)
		if failed {
			t.State = pb.TaskState_TASK_STATE_CANCELLED
			t.CancelReason = pb.CancelReason_CANCEL_REASON_DEPENDENCY_FAILED
			t.FinishedAt = timestamppb.Now()
			b.mu.Unlock()
			return
		}
		t.Attempt++
		opts := []Option{
			WithTaskID(id), WithKey(t.GetKey()), WithAttempt(t.GetAttempt()), WithMaxAttempts(t.GetMaxAttempts()),
			WithMetadata(t.GetMetadata()), WithContext(ctx),
		}
		if t.GetHasCheckpoint() {
			opts = append(opts, WithCheckpoint(t.GetCheckpoint()))
		}
		for dep, r := range results {
			opts = append(opts, WithDependencyResult(dep, r))
		}
		if d := t.GetDeadline(); d != nil {
			opts = append(opts, WithDeadline(d.AsTime()))
		}
		if t.GetAtMostOnce() {
			opts = append(opts, WithAtMostOnce())
		}
		queue, payload := t.GetQueue(), t.GetPayload()
		b.mu.Unlock()

		tt := NewTask(queue, payload, opts...)
		out := tt.Run(h, mws...)

		b.mu.Lock()
		b.outcomes[id] = append(b.outcomes[id], out)
		if cp, ok := tt.Task.LastCheckpoint(); ok {
			t.Checkpoint, t.HasCheckpoint = cp, true
		}
		t.UpdatedAt = timestamppb.Now()
		done := true
		switch {
		case out.Succeeded():
			t.State, t.Result = pb.TaskState_TASK_STATE_SUCCEEDED, out.Result
		case out.Retryable && t.GetAttempt() < t.GetMaxAttempts():
			t.LastError = out.ErrorMessage
			done = false
		default:
			t.State, t.LastError = pb.TaskState_TASK_STATE_DEAD, out.ErrorMessage
		}
		if done {
			t.FinishedAt = timestamppb.Now()
		}
		b.mu.Unlock()
		if done {
			return
		}
	}
}

// dependencyResults are the results of t's dependencies; failed when one did not succeed and
// t does not run anyway.
func (b *Broker) dependencyResults(t *pb.Task) (results map[string][]byte, failed bool) {
	results = map[string][]byte{}
	for _, dep := range t.GetDependsOn() {
		d := b.tasks[dep]
		if d.GetState() == pb.TaskState_TASK_STATE_SUCCEEDED {
			results[dep] = d.GetResult()
		} else if !t.GetRunIfDependencyFails() {
			return nil, true
		}
	}
	return results, false
}

// silentStream is a WatchTasks stream that sends nothing until its context ends.
type silentStream struct{ ctx context.Context }

func (s *silentStream) Header() (metadata.MD, error) { return metadata.MD{}, nil }
func (s *silentStream) Trailer() metadata.MD         { return nil }
func (s *silentStream) CloseSend() error             { return nil }
func (s *silentStream) Context() context.Context     { return s.ctx }
func (s *silentStream) SendMsg(any) error            { return nil }
func (s *silentStream) RecvMsg(any) error {
	<-s.ctx.Done()
	return status.FromContextError(s.ctx.Err()).Err()
}
