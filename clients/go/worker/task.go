package worker

import (
	"context"
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
}

func newTask(w *Worker, lt *pb.LeasedTask, cancel context.CancelCauseFunc) *Task {
	return &Task{
		LeasedTask:     lt,
		w:              w,
		cancel:         cancel,
		lastCheckpoint: lt.GetCheckpoint(),
		hasCheckpoint:  lt.GetHasCheckpoint(),
		expiresAt:      lt.GetLeaseExpiresAt().AsTime(),
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
	resp, err := t.w.broker.Checkpoint(ctx, &pb.CheckpointRequest{
		TaskId:     t.GetTaskId(),
		LeaseToken: t.GetLeaseToken(),
		Checkpoint: data,
		ExtendBy:   durationpb.New(t.w.cfg.LeaseDuration),
	})
	if rpcerr.IsLeaseLost(err) {
		t.markLost()
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

func (t *Task) markLost() {
	t.mu.Lock()
	t.lost = true
	t.mu.Unlock()
	t.cancel(ErrLeaseLost)
}

func (t *Task) isLost() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lost
}
