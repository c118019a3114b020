package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/taskbroker/taskbroker/clients/go/rpcerr"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// handle runs the handler for one leased task and settles it; it returns the tasks the
// settle leased (lease_next), which the caller runs in the same slot. run is Run's context
// (once it ends, no lease_next is asked for); parent is the same without its cancellation:
// a graceful stop lets handlers finish, and they keep its values.
func (w *Worker) handle(run, parent context.Context, lt *pb.LeasedTask) []*pb.LeasedTask {
	// The handler runs in a process span, a child of the producer's (the task's traceparent).
	parent, process := w.startProcess(parent, lt)
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	if d := lt.GetDeadline(); d != nil {
		var cancelDeadline context.CancelFunc
		ctx, cancelDeadline = context.WithDeadlineCause(ctx, d.AsTime(), ErrDeadline)
		defer cancelDeadline()
	}
	t := newTask(w, lt, cancel)

	w.mu.Lock()
	w.running[lt.GetTaskId()] = t
	if w.stopCause != nil {
		t.cancel(w.stopCause)
	}
	w.mu.Unlock()
	// The task stays in running (heartbeated) until its settle is done or given up.
	defer func() {
		w.mu.Lock()
		delete(w.running, lt.GetTaskId())
		w.mu.Unlock()
	}()
	stopWatch := t.watchExpiry()
	began := time.Now()
	result, err := w.call(ctx, t)
	took := time.Since(began).Seconds()
	process.end(took, err)
	stopWatch()

	queue := lt.GetQueue()
	log := t.log
	if !t.handlerReturned() {
		// Handed back at stop: another worker may run it now; the result is discarded.
		log.Debug("handler returned after its task was handed back; result discarded")
		w.metrics.task(queue, OutcomeFailed, took)
		return nil
	}
	if t.isLost() {
		w.metrics.task(queue, OutcomeLeaseLost, took)
		return nil // logged once when the lease was lost
	}
	var next []*pb.LeasedTask
	if err == nil {
		req := &pb.CompleteRequest{
			TaskId: lt.GetTaskId(), LeaseToken: lt.GetLeaseToken(), Result: result,
			LeaseNext: w.nextLease(run, queue),
		}
		err = w.report(t, "complete", func(context.Context) error {
			s := w.completer.complete(req)
			next = s.next
			return s.err
		})
		w.logSettle(t, "complete", err)
		w.metrics.task(queue, settleOutcome(err, OutcomeSucceeded), took)
		return next
	}

	req := FailRequestFor(ctx, t, err)
	req.LeaseNext = w.nextLease(run, queue)
	logHandlerFailure(log, lt, err, req, errors.Is(context.Cause(ctx), ErrStopTimeout))
	ferr := w.report(t, "fail", func(rctx context.Context) error {
		w.metrics.settleCall("Fail")
		resp, err := w.broker.Fail(rctx, req)
		next = resp.GetNextTasks()
		return err
	})
	w.logSettle(t, "fail", ferr)
	outcome := OutcomeFailed
	if errors.Is(context.Cause(ctx), ErrCancelRequested) {
		outcome = OutcomeCancelled
	}
	w.metrics.task(queue, settleOutcome(ferr, outcome), took)
	return next
}

// settleOutcome is the outcome of an attempt whose settle ended in err: want when it went
// through; lease_lost when the broker refused it as LEASE_LOST or it was given up at the
// lease's expiry or abandoned at stop (the broker hands the task out again); else failed.
func settleOutcome(err error, want string) string {
	var given *settleGivenUpError
	switch {
	case err == nil:
		return want
	case rpcerr.IsLeaseLost(err), errors.As(err, &given), errors.Is(err, errSettleAbandoned):
		return OutcomeLeaseLost
	default:
		return OutcomeFailed
	}
}

// logSettle logs a settle that did not go through: LEASE_LOST and a settle given up at the
// lease's expiry once at WARN (the broker hands the task out again), anything else at ERROR.
func (w *Worker) logSettle(t *Task, call string, err error) {
	var given *settleGivenUpError
	switch {
	case err == nil:
	case rpcerr.IsLeaseLost(err):
		w.metrics.leaseLost(t.GetQueue())
		t.log.Warn(call+" refused: lease lost (LEASE_LOST); another attempt may run", "call", call)
	case errors.As(err, &given):
		t.log.Warn(call+" given up at the lease's expiry; the broker will hand the task out again",
			"call", call, "err", given.err)
	case errors.Is(err, errSettleAbandoned):
		t.log.Warn(call+" abandoned: the worker stopped while it was retried", "call", call)
	default:
		t.log.Error(call+" failed", "call", call, "err", err)
	}
}

// nextLease is the lease_next a settle carries: one task for the slot it frees, no wait;
// nil when turned off or once Run's context has ended (stopping).
func (w *Worker) nextLease(run context.Context, queue string) *pb.LeaseRequest {
	if w.cfg.DisableLeaseNext || run.Err() != nil {
		return nil
	}
	queues := w.limits.nextQueues(w.cfg.Queues, queue)
	if len(queues) == 0 {
		return nil
	}
	return &pb.LeaseRequest{
		WorkerId:      w.cfg.WorkerID,
		Queues:        queues,
		MaxTasks:      1,
		LeaseDuration: durationpb.New(w.cfg.LeaseDuration),
		Labels:        w.cfg.Labels,
	}
}

// call runs the handler under the middleware, turning a panic into a retryable error (logged
// with its stack).
func (w *Worker) call(ctx context.Context, t *Task) (result []byte, err error) {
	defer recovered(t, &err)
	return w.handler(ctx, t)
}

// recovered turns a panic into *err (a *panicError); deferred around the handler (so
// middleware sees the panic as its error) and around the middleware. The panic is logged here,
// at ERROR with its stack: it is the one unexpected failure a Go handler has.
func recovered(t *Task, err *error) {
	if p := recover(); p != nil {
		*err = &panicError{msg: fmt.Sprintf("handler panicked: %v", p)}
		t.log.Error("handler panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	}
}

// panicError is a recovered panic as the attempt's error; it was logged when recovered.
type panicError struct{ msg string }

func (e *panicError) Error() string { return e.msg }

// logHandlerFailure logs the error a handler returned, one line without a stack: a planned
// retry (the task has attempts left and the error is not Permanent) and a permanent failure
// (Permanent, or the last attempt: the task goes DEAD) at WARN. A panic was logged at ERROR
// when it was recovered; a lost lease, once when it was lost.
func logHandlerFailure(log *slog.Logger, lt *pb.LeasedTask, err error, req *pb.FailRequest, handedBack bool) {
	var p *panicError
	switch {
	case errors.Is(err, ErrLeaseLost), errors.As(err, &p):
	case handedBack:
		log.Warn("handler failed after the stop timeout; the task is handed back", "err", err)
	case req.GetNonRetryable():
		log.Warn("handler failed permanently; the task goes DEAD", "err", err)
	case lt.GetMaxAttempts() > 0 && lt.GetAttempt() >= lt.GetMaxAttempts():
		log.Warn("handler failed on its last attempt; the task goes DEAD", "err", err,
			"max_attempts", lt.GetMaxAttempts())
	default:
		log.Warn("handler failed; the task will be retried", "err", err, "max_attempts", lt.GetMaxAttempts())
	}
}

// Middleware wraps every handler call of a worker: it sees the task, can time the call, read
// the outcome (result or error, a panic as its error) and replace it. Config.Middleware's
// first is the outermost.
//
//	func logging(next worker.Handler) worker.Handler {
//		return func(ctx context.Context, t *worker.Task) ([]byte, error) {
//			began := time.Now()
//			result, err := next(ctx, t)
//			slog.Info("task", "queue", t.GetQueue(), "took", time.Since(began), "err", err)
//			return result, err
//		}
//	}
type Middleware func(next Handler) Handler

// chain wraps h (panics recovered) in mws, the first outermost.
func chain(h Handler, mws []Middleware) Handler {
	inner := func(ctx context.Context, t *Task) (result []byte, err error) {
		defer recovered(t, &err)
		return h(ctx, t)
	}
	out := Handler(inner)
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] != nil {
			out = mws[i](out)
		}
	}
	return out
}

// SettleMargin: a settle is not tried again when the next try would start within this much of
// the lease's expiry (docs/client-spec.md point 11).
const SettleMargin = time.Second

// errSettleAbandoned: the worker stopped (stop timeout + stop margin) while a settle was retried.
var errSettleAbandoned = errors.New("taskbroker: settle abandoned at stop")

// settleGivenUpError: the broker stayed unreachable until the lease's expiry was near.
type settleGivenUpError struct{ err error }

func (e *settleGivenUpError) Error() string {
	return "settle given up at the lease's expiry: " + e.err.Error()
}

// report sends Complete or Fail, retrying with backoff while the broker is unreachable (the
// lease token stays valid across a broker restart) until the next try would start within
// SettleMargin of the lease's expiry; both calls are idempotent for the same lease token.
// LEASE_LOST is final.
func (w *Worker) report(t *Task, call string, send func(context.Context) error) error {
	for failures := 0; ; failures++ {
		ctx, cancel := context.WithTimeout(w.settleCtx, CallTimeout)
		err := send(ctx)
		cancel()
		if err == nil || rpcerr.IsLeaseLost(err) {
			return err
		}
		if w.settleCtx.Err() != nil {
			return errSettleAbandoned
		}
		if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
			return err
		}
		pause := Backoff(failures)
		if time.Until(t.LeaseExpiry()) < pause+SettleMargin {
			return &settleGivenUpError{err: err}
		}
		w.metrics.settleRetry(t.GetQueue())
		t.log.Warn(call+" failed; retrying", "call", call, "code", status.Code(err).String(),
			"err", err, "after", pause)
		select {
		case <-time.After(pause):
		case <-w.settleCtx.Done():
			return errSettleAbandoned
		}
	}
}

// handBack gives a task whose handler is left running at stop back to the broker: Fail,
// retryable, retry_after 0, so it is READY at once. The call has a short deadline so a
// frozen broker cannot hold the stop.
func (w *Worker) handBack(t *Task) {
	ctx, cancel := context.WithTimeout(context.Background(), HandBackTimeout)
	defer cancel()
	w.metrics.settleCall("Fail")
	_, err := w.broker.Fail(ctx, &pb.FailRequest{
		TaskId: t.GetTaskId(), LeaseToken: t.GetLeaseToken(),
		ErrorMessage: "worker stopped", RetryAfter: durationpb.New(0),
	})
	if err != nil {
		t.log.Warn("hand-back at stop failed; the task returns when its lease expires", "err", err)
		return
	}
	t.log.Warn("task handed back at stop: its handler did not return in time")
}
