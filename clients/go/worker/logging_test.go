package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

// A returned error is logged at WARN in one line: "will be retried" while attempts are left,
// "goes DEAD" on the last attempt and for a Permanent error; nothing at ERROR (only a panic
// is, TestAPanicIsLoggedWithItsStack).
func TestHandlerFailuresAreLoggedAtWarn(t *testing.T) {
	f := newFixture(t)
	ids := f.submit(t,
		&pb.TaskSpec{Payload: []byte("flaky"), Retry: &pb.RetryPolicy{MaxAttempts: 2, InitialBackoff: durationpb.New(0)}},
		&pb.TaskSpec{Payload: []byte("bad")},
	)
	logs := &records{}
	f.startOn(t, f.conn, worker.Config{Logger: logs.logger()}, func(ctx context.Context, task *worker.Task) ([]byte, error) {
		if string(task.GetPayload()) == "bad" {
			return nil, worker.Permanentf("no such order")
		}
		return nil, errors.New("flaky backend")
	})
	f.waitState(t, ids[0], pb.TaskState_TASK_STATE_DEAD)
	f.waitState(t, ids[1], pb.TaskState_TASK_STATE_DEAD)

	retried := logs.matching(slog.LevelWarn, "handler failed; the task will be retried")
	if len(retried) != 1 || !strings.Contains(retried[0], "flaky backend") || !strings.Contains(retried[0], ids[0]) {
		t.Errorf("planned-retry WARN lines %q, want one for %s with its error", retried, ids[0])
	}
	last := logs.matching(slog.LevelWarn, "handler failed on its last attempt; the task goes DEAD")
	if len(last) != 1 || !strings.Contains(last[0], "flaky backend") || !strings.Contains(last[0], ids[0]) {
		t.Errorf("last-attempt WARN lines %q, want one for %s", last, ids[0])
	}
	perm := logs.matching(slog.LevelWarn, "handler failed permanently; the task goes DEAD")
	if len(perm) != 1 || !strings.Contains(perm[0], "no such order") || !strings.Contains(perm[0], ids[1]) {
		t.Errorf("permanent WARN lines %q, want one for %s", perm, ids[1])
	}
	for _, l := range append(retried, append(last, perm...)...) {
		if strings.Contains(l, "\n") {
			t.Errorf("a handler failure took more than one line: %q", l)
		}
	}
	if errs := logs.matching(slog.LevelError, ""); len(errs) != 0 {
		t.Errorf("returned errors were logged at ERROR: %q", errs)
	}
}
