package worker

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// heartbeatLoop extends every running lease in one Heartbeat call every third of the
// lease duration, so two heartbeats can fail before a lease runs out.
func (w *Worker) heartbeatLoop(ctx context.Context) {
	tick := time.NewTicker(HeartbeatInterval(w.cfg.LeaseDuration))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			w.heartbeatOnce(ctx)
		}
	}
}

func (w *Worker) heartbeatOnce(ctx context.Context) {
	w.mu.Lock()
	tasks := make([]*Task, 0, len(w.running))
	for _, t := range w.running {
		tasks = append(tasks, t)
	}
	w.mu.Unlock()
	if len(tasks) == 0 {
		return
	}

	refs := make([]*pb.LeaseRef, len(tasks))
	for i, t := range tasks {
		refs[i] = &pb.LeaseRef{TaskId: t.GetTaskId(), LeaseToken: t.GetLeaseToken()}
	}
	callCtx, cancel := context.WithTimeout(ctx, w.cfg.LeaseDuration/3)
	defer cancel()
	resp, err := w.broker.Heartbeat(callCtx, &pb.HeartbeatRequest{
		WorkerId: w.cfg.WorkerID,
		Leases:   refs,
		ExtendBy: durationpb.New(w.cfg.LeaseDuration),
	})
	if err != nil {
		w.log.Warn("heartbeat failed", "err", err, "leases", len(refs))
		// Without an answer, a lease past its expiry is as good as lost: another worker
		// may hold the task now.
		now := time.Now()
		for _, t := range tasks {
			t.mu.Lock()
			expired := now.After(t.expiresAt)
			t.mu.Unlock()
			if expired {
				t.markLost("the lease expired without a successful heartbeat")
			}
		}
		return
	}
	// Statuses come back in request order.
	for i, st := range resp.GetLeases() {
		if i >= len(tasks) {
			break
		}
		t := tasks[i]
		switch {
		case st.GetLost():
			t.markLost("a heartbeat answered lost")
		case st.GetCancelRequested():
			t.cancel(ErrCancelRequested)
		}
		if st.GetLeaseExpiresAt() != nil {
			t.mu.Lock()
			t.expiresAt = st.GetLeaseExpiresAt().AsTime()
			t.mu.Unlock()
		}
	}
}
