package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	"github.com/taskbroker/taskbroker/clients/go/rpcerr"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// handle runs the handler for one leased task and settles it; it returns the tasks the
// settle leased (lease_next), which the caller runs in the same slot. run is Run's context
// (once it ends, no lease_next is asked for); parent is the same without its cancellation:
// a graceful stop lets handlers finish, and they keep its values.
func (w *Worker) handle(run, parent context.Context, lt *pb.LeasedTask) []*pb.LeasedTask {
	// The handler's span context is the producer's (W3C traceparent in the task's metadata).
	parent = taskbroker.ExtractTrace(parent, lt.GetMetadata())
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
	result, err := w.call(ctx, t)
	w.mu.Lock()
	delete(w.running, lt.GetTaskId())
	w.mu.Unlock()

	log := w.log.With("task_id", lt.GetTaskId(), "attempt", lt.GetAttempt())
	if t.isLost() {
		log.Warn("lease lost; not reporting", "handler_err", err)
		return nil
	}
	var next []*pb.LeasedTask
	if err == nil {
		err = w.report(func(rctx context.Context) error {
			resp, err := w.broker.Complete(rctx, &pb.CompleteRequest{
				TaskId: lt.GetTaskId(), LeaseToken: lt.GetLeaseToken(), Result: result,
				LeaseNext: w.nextLease(run),
			})
			next = resp.GetNextTasks()
			return err
		})
		if err != nil {
			log.Error("complete failed", "err", err)
		}
		return next
	}

	req := &pb.FailRequest{
		TaskId: lt.GetTaskId(), LeaseToken: lt.GetLeaseToken(), ErrorMessage: err.Error(),
		LeaseNext: w.nextLease(run),
	}
	var perm *PermanentError
	var retry *RetryableError
	switch {
	case errors.As(err, &perm):
		req.NonRetryable = true
	case errors.As(err, &retry):
		if retry.RetryAfter > 0 {
			req.RetryAfter = durationpb.New(retry.RetryAfter)
		}
		req.PreferSameWorker = retry.PreferSameWorker
	}
	ferr := w.report(func(rctx context.Context) error {
		resp, err := w.broker.Fail(rctx, req)
		next = resp.GetNextTasks()
		return err
	})
	switch {
	case rpcerr.IsLeaseLost(ferr):
		log.Info("lease lost; the failure was not recorded", "handler_err", err)
	case ferr != nil:
		log.Error("fail failed", "err", ferr, "handler_err", err)
	}
	return next
}

// nextLease is the lease_next a settle carries: one task for the slot it frees, no wait;
// nil when turned off or once Run's context has ended (stopping).
func (w *Worker) nextLease(run context.Context) *pb.LeaseRequest {
	if w.cfg.DisableLeaseNext || run.Err() != nil {
		return nil
	}
	return &pb.LeaseRequest{
		WorkerId:      w.cfg.WorkerID,
		Queues:        w.cfg.Queues,
		MaxTasks:      1,
		LeaseDuration: durationpb.New(w.cfg.LeaseDuration),
		Labels:        w.cfg.Labels,
	}
}

// call runs the handler, turning a panic into a retryable error.
func (w *Worker) call(ctx context.Context, t *Task) (result []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return w.handler(ctx, t)
}

// report sends Complete or Fail, retrying while the broker is unreachable; both are
// idempotent for the same lease token. LEASE_LOST is final.
func (w *Worker) report(send func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
		err := send(ctx)
		cancel()
		if err == nil || rpcerr.IsLeaseLost(err) || attempt == 5 {
			return err
		}
		if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
			return err
		}
		time.Sleep(Backoff(attempt - 1))
	}
}
