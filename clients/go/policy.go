package taskbroker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// RetryDefaults are retry policies by queue, declared with the queues' handlers
// (worker.Mux.HandlePolicy; docs/client-spec.md point 20). Dial with WithRetryDefaults and
// every Submit on that connection fills, field by field, what a task's own retry leaves
// unset: the spec's own retry wins, then these, then the broker's [queues.NAME] retry, then
// its [retry]. Safe for concurrent use.
type RetryDefaults struct {
	mu      sync.RWMutex
	byQueue map[string]*pb.RetryPolicy
}

// NewRetryDefaults returns an empty table.
func NewRetryDefaults() *RetryDefaults { return &RetryDefaults{byQueue: map[string]*pb.RetryPolicy{}} }

// Set makes r queue's defaults (nil or an empty policy removes them).
func (d *RetryDefaults) Set(queue string, r *pb.RetryPolicy) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r == nil || proto.Equal(r, &pb.RetryPolicy{}) {
		delete(d.byQueue, queue)
		return
	}
	d.byQueue[queue] = proto.Clone(r).(*pb.RetryPolicy)
}

// Apply fills the unset retry fields of each spec from its queue's defaults, in place.
func (d *RetryDefaults) Apply(specs []*pb.TaskSpec) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, s := range specs {
		if r, ok := d.byQueue[s.GetQueue()]; ok {
			s.Retry = MergeRetry(s.GetRetry(), r)
		}
	}
}

// UnaryClientInterceptor fills the retry defaults into every SubmitRequest sent through it
// (a copy: the caller's request is left as it was).
func (d *RetryDefaults) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if sr, ok := req.(*pb.SubmitRequest); ok && method == pb.BrokerService_Submit_FullMethodName {
			c := proto.Clone(sr).(*pb.SubmitRequest)
			d.Apply(c.Tasks)
			req = c
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// WithRetryDefaults makes every Submit on the connection take d's defaults.
func WithRetryDefaults(d *RetryDefaults) Option {
	return WithDialOptions(grpc.WithChainUnaryInterceptor(d.UnaryClientInterceptor()))
}

// MergeRetry is own's fields, and defaults' where own leaves one unset (nil own: a copy of
// defaults).
func MergeRetry(own, defaults *pb.RetryPolicy) *pb.RetryPolicy {
	if defaults == nil {
		return own
	}
	r := &pb.RetryPolicy{}
	if own != nil {
		r = proto.Clone(own).(*pb.RetryPolicy)
	}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = defaults.MaxAttempts
	}
	if r.BackoffMultiplier == 0 {
		r.BackoffMultiplier = defaults.BackoffMultiplier
	}
	if r.InitialBackoff == nil {
		r.InitialBackoff = defaults.InitialBackoff
	}
	if r.MaxBackoff == nil {
		r.MaxBackoff = defaults.MaxBackoff
	}
	if r.Jitter == nil {
		r.Jitter = defaults.Jitter
	}
	return r
}

// TaskDef ties a queue to its payload type P and result type R, for producers and workers
// (worker.HandleTask) alike. Payloads and results are JSON.
//
//	var Emails = taskbroker.Define[Email, Sent]("emails")
//	sent, err := Emails.SubmitAndWait(ctx, broker, admin, Email{To: "ada@example.com"})
//	_, err = Emails.SubmitIn(ctx, broker, Email{To: "bob@example.com"}, time.Hour)
type TaskDef[P, R any] struct {
	Queue string
	// Retry, if set, fills what each submitted task's own retry leaves unset.
	Retry *pb.RetryPolicy
}

// Define returns the definition of queue's tasks.
func Define[P, R any](queue string) TaskDef[P, R] { return TaskDef[P, R]{Queue: queue} }

// WithRetryPolicy returns d with r as its retry defaults.
func (d TaskDef[P, R]) WithRetryPolicy(r *pb.RetryPolicy) TaskDef[P, R] {
	d.Retry = r
	return d
}

// Submit submits one task with payload p; opts are SubmitJSON's (WithKey, WithRetry...).
func (d TaskDef[P, R]) Submit(ctx context.Context, broker pb.BrokerServiceClient, p P, opts ...SubmitOption) (*pb.SubmitResult, error) {
	if d.Retry != nil {
		retry := d.Retry
		opts = append(opts, edit(func(s *pb.TaskSpec) { s.Retry = MergeRetry(s.GetRetry(), retry) }))
	}
	return SubmitJSON(ctx, broker, d.Queue, p, opts...)
}

// SubmitIn submits a task not leased before delay from now.
func (d TaskDef[P, R]) SubmitIn(ctx context.Context, broker pb.BrokerServiceClient, p P, delay time.Duration, opts ...SubmitOption) (*pb.SubmitResult, error) {
	return d.Submit(ctx, broker, p, append(opts, WithDelay(delay))...)
}

// SubmitAt submits a task not leased before at.
func (d TaskDef[P, R]) SubmitAt(ctx context.Context, broker pb.BrokerServiceClient, p P, at time.Time, opts ...SubmitOption) (*pb.SubmitResult, error) {
	return d.Submit(ctx, broker, p, append(opts, WithRunAt(at))...)
}

// SubmitAndWait submits, waits and decodes the result; a task that ends DEAD or CANCELLED
// is a *TaskFailedError.
func (d TaskDef[P, R]) SubmitAndWait(ctx context.Context, broker pb.BrokerServiceClient, admin pb.AdminServiceClient, p P, opts ...SubmitOption) (R, error) {
	var zero R
	res, err := d.Submit(ctx, broker, p, opts...)
	if err != nil {
		return zero, err
	}
	task, err := Wait(ctx, admin, res.GetTaskId())
	if err != nil {
		return zero, err
	}
	r, err := ResultJSON[R](task)
	if err != nil {
		return zero, fmt.Errorf("taskbroker: queue %s: %w", d.Queue, err)
	}
	return r, nil
}
