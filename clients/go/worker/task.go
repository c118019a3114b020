package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/taskbroker/taskbroker/clients/go/rpcerr"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// Task is one leased task as a handler sees it. The embedded LeasedTask gives the payload,
// attempt, metadata, fencing token and the checkpoint the lease arrived with.
type Task struct {
	*pb.LeasedTask

	w      *Worker
	cancel context.CancelCauseFunc

	mu             sync.Mutex // guards the fields below: heartbeats and the handler both touch them
	lastCheckpoint []byte
	hasCheckpoint  bool
	expiresAt      time.Time
	lost           bool
	// returned: the handler has returned; handedBack: the stop gave the task back while the
	// handler still ran (its result is discarded).
	returned   bool
	handedBack bool

	log *slog.Logger
}

func newTask(w *Worker, lt *pb.LeasedTask, cancel context.CancelCauseFunc) *Task {
	return &Task{
		LeasedTask:     lt,
		w:              w,
		cancel:         cancel,
		lastCheckpoint: lt.GetCheckpoint(),
		hasCheckpoint:  lt.GetHasCheckpoint(),
		expiresAt:      lt.GetLeaseExpiresAt().AsTime(),
		log:            w.log.With("task_id", lt.GetTaskId(), "attempt", lt.GetAttempt()),
	}
}

// LastCheckpoint returns the newest checkpoint: the one saved by this attempt, or else the
// one an earlier attempt saved. ok is false when there is none.
func (t *Task) LastCheckpoint() (data []byte, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastCheckpoint, t.hasCheckpoint
}

// Checkpoint durably stores progress that the next attempt receives, and extends the lease.
// When the lease is lost it cancels the handler's context (cause ErrLeaseLost) and returns
// ErrLeaseLost; when an operator cancelled the task it cancels with ErrCancelRequested.
func (t *Task) Checkpoint(ctx context.Context, data []byte) error {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	resp, err := t.w.broker.Checkpoint(ctx, &pb.CheckpointRequest{
		TaskId:     t.GetTaskId(),
		LeaseToken: t.GetLeaseToken(),
		Checkpoint: data,
		ExtendBy:   durationpb.New(t.w.cfg.LeaseDuration),
	})
	if rpcerr.IsLeaseLost(err) {
		t.markLost("checkpoint answered LEASE_LOST")
		return ErrLeaseLost
	}
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.lastCheckpoint, t.hasCheckpoint = data, true
	t.expiresAt = resp.GetLeaseExpiresAt().AsTime()
	t.mu.Unlock()
	if resp.GetCancelRequested() {
		t.cancel(ErrCancelRequested)
	}
	return nil
}

// LeaseExpiry is when the lease runs out unless extended, as the broker last said (a
// heartbeat or a checkpoint moves it).
func (t *Task) LeaseExpiry() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.expiresAt
}

// markLost cancels the handler with ErrLeaseLost and logs it once (WARN): the task may be
// leased elsewhere, so nothing more is sent for it.
func (t *Task) markLost(why string) {
	t.mu.Lock()
	first := !t.lost && !t.handedBack
	t.lost = true
	t.mu.Unlock()
	if first {
		t.w.metrics.leaseLost(t.GetQueue())
		t.log.Warn("lease lost: "+why+"; the task is not settled by this worker", "reason", why)
	}
	t.cancel(ErrLeaseLost)
}

func (t *Task) isLost() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lost
}

// watchExpiry cancels the handler (ErrLeaseLost) when the lease's expiry passes by the local
// clock without an extension, whether or not the broker answers heartbeats. stop ends it.
func (t *Task) watchExpiry() (stop func()) {
	done := make(chan struct{})
	go func() {
		for {
			d := time.Until(t.LeaseExpiry())
			if d <= 0 {
				// A lease that ends at the task's deadline: the deadline cancels the handler.
				if dl := t.GetDeadline(); dl == nil || dl.AsTime().After(t.LeaseExpiry()) {
					t.markLost("the lease expired by the local clock")
				}
				return
			}
			timer := time.NewTimer(d)
			select {
			case <-done:
				timer.Stop()
				return
			case <-timer.C:
			}
		}
	}()
	return func() { close(done) }
}

// handlerReturned records that the handler returned; false when the task was handed back
// at stop before that.
func (t *Task) handlerReturned() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.returned = true
	return !t.handedBack
}

// takeForHandBack marks a task whose handler still runs as handed back; false when the
// handler has returned (its own settle reports it) or the lease is lost.
func (t *Task) takeForHandBack() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.returned || t.lost {
		return false
	}
	t.handedBack = true
	return true
}
