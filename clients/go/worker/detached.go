package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// NewDetachedTask builds the Task a handler receives for lt without a Worker: for tests
// (package tbtest builds on it) and for running a handler by hand. Its Checkpoint calls
// BrokerService.Checkpoint on conn (a fake one in tests) with the default lease duration as
// the extension. ctx is the context to pass the handler: cancel cancels it with a cause
// (ErrCancelRequested, ErrLeaseLost, ErrStopTimeout, ErrDeadline), as a Worker does, and a
// deadline in lt cancels it with ErrDeadline. logger may be nil (nothing is logged).
func NewDetachedTask(parent context.Context, lt *pb.LeasedTask, conn grpc.ClientConnInterface, logger *slog.Logger) (ctx context.Context, t *Task, cancel context.CancelCauseFunc) {
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m, err := newMetrics(noop.NewMeterProvider())
	if err != nil {
		panic("worker: no-op metrics: " + err.Error()) // the no-op provider cannot fail
	}
	w := &Worker{
		cfg:     Config{LeaseDuration: DefaultLeaseDuration},
		broker:  pb.NewBrokerServiceClient(conn),
		log:     logger,
		running: map[string]*Task{},
		metrics: m,
	}
	ctx, cancel = context.WithCancelCause(parent)
	if d := lt.GetDeadline(); d != nil {
		var stop context.CancelFunc
		ctx, stop = context.WithDeadlineCause(ctx, d.AsTime(), ErrDeadline)
		inner := cancel
		cancel = func(cause error) { inner(cause); stop() }
	}
	return ctx, newTask(w, lt, cancel), cancel
}

// Invoke runs h on t under mws (the first outermost) as a Worker's slot does: a panic in h or
// a middleware becomes a retryable error.
func Invoke(ctx context.Context, t *Task, h Handler, mws ...Middleware) (result []byte, err error) {
	defer recovered(t, &err)
	return chain(h, mws)(ctx, t)
}

// FailRequestFor is the Fail a Worker sends when an attempt of t under ctx ended with err
// (non-nil): non_retryable for a *PermanentError, retry_after, prefer_same_worker and the
// cooldown from a *RetryableError, retry_after 0 (handed back) after a stop timeout.
func FailRequestFor(ctx context.Context, t *Task, err error) *pb.FailRequest {
	req := &pb.FailRequest{TaskId: t.GetTaskId(), LeaseToken: t.GetLeaseToken(), ErrorMessage: err.Error()}
	var perm *PermanentError
	var retry *RetryableError
	switch {
	case errors.Is(context.Cause(ctx), ErrStopTimeout):
		// A failure after the stop's cancellation hands the task back: READY at once.
		req.RetryAfter = durationpb.New(0)
	case errors.As(err, &perm):
		req.NonRetryable = true
	case errors.As(err, &retry):
		if retry.RetryAfter > 0 {
			req.RetryAfter = durationpb.New(retry.RetryAfter)
		}
		req.PreferSameWorker = retry.PreferSameWorker
		req.Cooldown = cooldownOf(retry)
	}
	return req
}

// cooldownOf is the FailRequest.cooldown a RetryableError asks for, nil for none.
func cooldownOf(r *RetryableError) *pb.Cooldown {
	switch {
	case r.CoolDownKey > 0:
		return &pb.Cooldown{Scope: pb.CooldownScope_COOLDOWN_SCOPE_CONCURRENCY_KEY, Duration: durationpb.New(r.CoolDownKey)}
	case r.CoolDownBucket > 0:
		return &pb.Cooldown{Scope: pb.CooldownScope_COOLDOWN_SCOPE_BUCKET, Duration: durationpb.New(r.CoolDownBucket)}
	}
	return nil
}

// Lost reports whether the task's lease is known to be lost (a checkpoint answered
// LEASE_LOST, a heartbeat said so, or it expired by the local clock): a Worker then
// reports nothing for it.
func (t *Task) Lost() bool { return t.isLost() }

// Lookup is the handler registered for queue, nil when there is none.
func (m *Mux) Lookup(queue string) Handler { return m.handlers[queue] }
