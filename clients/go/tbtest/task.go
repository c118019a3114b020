// Package tbtest tests taskbroker handlers and producers without a broker.
//
// NewTask builds the *worker.Task (and the context) a handler receives, from a queue and a
// payload and whatever else the test sets (attempt, metadata, the checkpoint an earlier
// attempt saved), and records what the handler did: its checkpoints, its looks at the
// context's cancellation and, through Run, its Outcome as a Worker would report it.
//
//	tt := tbtest.NewTask("imports", payload, tbtest.WithAttempt(2), tbtest.WithCheckpoint([]byte("1")))
//	out := tt.Run(worker.HandleJSON(importRows))
//	if !out.Succeeded() || len(tt.Checkpoints()) != 2 { t.Fatal(out) }
//
// NewBroker is an in-process fake broker for producer-and-worker tests: register handlers on
// it as on a worker.Mux, and pass it (a grpc.ClientConnInterface) wherever a connection goes:
// taskbroker.Submit, SubmitJSON, Wait, WaitAll and SubmitAndWait work on it unchanged. A
// submit runs the task's handler at once, attempt after attempt as the broker would.
package tbtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/taskbroker/taskbroker/clients/go/rpcerr"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

// DefaultMaxAttempts is what a task gets when its retry policy sets none (the broker's default).
const DefaultMaxAttempts = 3

var ids atomic.Int64

func newID() string { return fmt.Sprintf("test-task-%d", ids.Add(1)) }

// Option sets a field of the task NewTask builds.
type Option func(*settings)

type settings struct {
	lt        *pb.LeasedTask
	parent    context.Context
	cancelAt  int
	loseAt    int
	cancelled error
}

// WithTaskID sets the task id (default "test-task-<n>").
func WithTaskID(id string) Option { return func(s *settings) { s.lt.TaskId = id } }

// WithKey sets the task's idempotency key.
func WithKey(key string) Option { return func(s *settings) { s.lt.Key = key } }

// WithAttempt sets the 1-based attempt number (default 1).
func WithAttempt(n uint32) Option { return func(s *settings) { s.lt.Attempt = n } }

// WithMaxAttempts sets the attempt after which no retry is made (default 3).
func WithMaxAttempts(n uint32) Option { return func(s *settings) { s.lt.MaxAttempts = n } }

// WithMetadata adds metadata pairs.
func WithMetadata(md map[string]string) Option {
	return func(s *settings) {
		for k, v := range md {
			s.lt.Metadata[k] = v
		}
	}
}

// WithCheckpoint is the checkpoint an earlier attempt saved: LastCheckpoint returns it.
func WithCheckpoint(data []byte) Option {
	return func(s *settings) { s.lt.Checkpoint, s.lt.HasCheckpoint = data, true }
}

// WithDependencyResult adds the result of a SUCCEEDED dependency.
func WithDependencyResult(taskID string, result []byte) Option {
	return func(s *settings) { s.lt.DependencyResults[taskID] = result }
}

// WithDeadline sets the task's deadline: the handler's context ends then (cause worker.ErrDeadline).
func WithDeadline(t time.Time) Option {
	return func(s *settings) { s.lt.Deadline = timestamppb.New(t) }
}

// WithAtMostOnce marks the task at most once: its only attempt.
func WithAtMostOnce() Option {
	return func(s *settings) { s.lt.AtMostOnce, s.lt.MaxAttempts = true, 1 }
}

// WithContext sets the parent of the handler's context (default context.Background()).
func WithContext(ctx context.Context) Option { return func(s *settings) { s.parent = ctx } }

// CancelAtCheckpoint makes the n-th checkpoint's answer (1-based) say an operator cancelled the
// task: the handler's context is cancelled with worker.ErrCancelRequested.
func CancelAtCheckpoint(n int) Option { return func(s *settings) { s.cancelAt = n } }

// LoseLeaseAtCheckpoint makes the n-th checkpoint (1-based) answer LEASE_LOST: Checkpoint
// returns worker.ErrLeaseLost and the context is cancelled with it.
func LoseLeaseAtCheckpoint(n int) Option { return func(s *settings) { s.loseAt = n } }

// Cancelled starts the handler's context already cancelled with cause (for example
// worker.ErrStopTimeout).
func Cancelled(cause error) Option { return func(s *settings) { s.cancelled = cause } }

// LeasedTask is the lease a worker would get for a task of queue carrying payload: attempt 1
// of 3 unless opts say otherwise.
func LeasedTask(queue string, payload []byte, opts ...Option) *pb.LeasedTask {
	return build(queue, payload, opts).lt
}

func build(queue string, payload []byte, opts []Option) *settings {
	s := &settings{
		lt: &pb.LeasedTask{
			TaskId: newID(), Queue: queue, Payload: payload, Attempt: 1, MaxAttempts: DefaultMaxAttempts,
			Metadata: map[string]string{}, DependencyResults: map[string][]byte{},
			LeaseToken: "test-lease", FencingToken: 1,
			LeaseExpiresAt: timestamppb.New(time.Now().Add(worker.DefaultLeaseDuration)),
			CreatedAt:      timestamppb.Now(),
		},
		parent: context.Background(),
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Task is a handler's attempt with no broker: pass Context() and Task to the handler, or Run it.
type Task struct {
	// Task is what the handler receives: the same type a Worker hands it.
	Task   *worker.Task
	ctx    *countingContext
	cancel context.CancelCauseFunc
	rec    *recorder
}

// NewTask builds a task of queue carrying payload (attempt 1 of 3 unless opts say otherwise)
// and the context its handler runs under.
func NewTask(queue string, payload []byte, opts ...Option) *Task {
	s := build(queue, payload, opts)
	rec := &recorder{cancelAt: s.cancelAt, loseAt: s.loseAt}
	ctx, task, cancel := worker.NewDetachedTask(s.parent, s.lt, rec, nil)
	if s.cancelled != nil {
		cancel(s.cancelled)
	}
	return &Task{Task: task, ctx: &countingContext{Context: ctx, rec: rec}, cancel: cancel, rec: rec}
}

// Context is the context to pass the handler.
func (t *Task) Context() context.Context { return t.ctx }

// Cancel cancels the handler's context with cause, as a Worker does (worker.ErrCancelRequested,
// worker.ErrLeaseLost, worker.ErrStopTimeout, worker.ErrDeadline).
func (t *Task) Cancel(cause error) { t.cancel(cause) }

// Checkpoints are the checkpoints the handler saved, in order.
func (t *Task) Checkpoints() [][]byte {
	t.rec.mu.Lock()
	defer t.rec.mu.Unlock()
	return append([][]byte(nil), t.rec.checkpoints...)
}

// CancelChecks is how many times the handler (or code it called) asked the context's Err:
// zero means it never looked whether it should stop that way. (Done is not counted: the
// context package and gRPC call it on every derived context.)
func (t *Task) CancelChecks() int { return int(t.rec.checks.Load()) }

// Run calls h on the task under mws (the first outermost) as a Worker does, a panic becoming
// a retryable failure, and returns the Outcome (also kept: Outcome).
func (t *Task) Run(h worker.Handler, mws ...worker.Middleware) Outcome {
	result, err := worker.Invoke(t.ctx, t.Task, h, mws...)
	out := Outcome{Result: result, Err: err, LeaseLost: t.Task.Lost()}
	if err != nil {
		out.Result = nil
		req := worker.FailRequestFor(t.ctx, t.Task, err)
		out.ErrorMessage = req.GetErrorMessage()
		out.Retryable = !req.GetNonRetryable()
		out.RetryAfter = req.GetRetryAfter().AsDuration()
		out.HasRetryAfter = req.GetRetryAfter() != nil
		out.PreferSameWorker = req.GetPreferSameWorker()
		switch c := req.GetCooldown(); c.GetScope() {
		case pb.CooldownScope_COOLDOWN_SCOPE_CONCURRENCY_KEY:
			out.CoolDownKey = c.GetDuration().AsDuration()
		case pb.CooldownScope_COOLDOWN_SCOPE_BUCKET:
			out.CoolDownBucket = c.GetDuration().AsDuration()
		}
	}
	t.rec.mu.Lock()
	t.rec.outcome = &out
	t.rec.mu.Unlock()
	return out
}

// Outcome is the outcome of the last Run, nil before one.
func (t *Task) Outcome() *Outcome {
	t.rec.mu.Lock()
	defer t.rec.mu.Unlock()
	return t.rec.outcome
}

// Outcome is how one attempt ended, as a Worker reports it: Complete with Result, or Fail.
type Outcome struct {
	Result []byte
	// Err is what the handler returned (a panic as a retryable error).
	Err error
	// ErrorMessage is the Fail's error_message: the task's last_error.
	ErrorMessage string
	// Retryable is false for a worker.Permanent error (and a payload HandleJSON cannot decode).
	Retryable bool
	// RetryAfter is what worker.RetryAfter asked for (HasRetryAfter: it asked).
	RetryAfter       time.Duration
	HasRetryAfter    bool
	PreferSameWorker bool
	// CoolDownKey and CoolDownBucket are the cooldown the failure asked for on the task's
	// concurrency key or its bucket (worker.CoolDownKey, worker.CoolDownBucket); zero: none.
	CoolDownKey    time.Duration
	CoolDownBucket time.Duration
	// LeaseLost: the lease was lost during the attempt; a Worker reports nothing then.
	LeaseLost bool
}

// Succeeded reports whether the handler returned no error: the worker sends Complete.
func (o Outcome) Succeeded() bool { return o.Err == nil }

// Permanent reports whether the attempt failed for good: the task goes DEAD without a retry.
func (o Outcome) Permanent() bool { return o.Err != nil && !o.Retryable }

// recorder answers the detached task's Checkpoint calls and keeps what it saw.
type recorder struct {
	mu          sync.Mutex
	checkpoints [][]byte
	outcome     *Outcome
	checks      atomic.Int64
	cancelAt    int
	loseAt      int
}

func (r *recorder) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	if method != pb.BrokerService_Checkpoint_FullMethodName {
		return status.Errorf(codes.Unimplemented, "tbtest: a handler's task has no %s", method)
	}
	req := args.(*pb.CheckpointRequest)
	r.mu.Lock()
	n := len(r.checkpoints) + 1
	if r.loseAt > 0 && n >= r.loseAt {
		r.mu.Unlock()
		st, _ := status.New(codes.Aborted, "lease lost").WithDetails(&errdetails.ErrorInfo{Domain: rpcerr.Domain, Reason: rpcerr.ReasonLeaseLost})
		return st.Err()
	}
	r.checkpoints = append(r.checkpoints, req.GetCheckpoint())
	r.mu.Unlock()
	proto.Merge(reply.(proto.Message), &pb.CheckpointResponse{
		LeaseExpiresAt:  timestamppb.New(time.Now().Add(worker.DefaultLeaseDuration)),
		CancelRequested: r.cancelAt > 0 && n >= r.cancelAt,
	})
	return nil
}

func (r *recorder) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "tbtest: a handler's task has no streams")
}

// countingContext counts the handler's ctx.Err() calls.
type countingContext struct {
	context.Context
	rec *recorder
}

func (c *countingContext) Err() error {
	c.rec.checks.Add(1)
	return c.Context.Err()
}
