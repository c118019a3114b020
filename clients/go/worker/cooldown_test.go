package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/tbtest"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

func TestCooldownHelpersCombineWithTheOtherRetryHints(t *testing.T) {
	base := errors.New("429 Too Many Requests")
	var r *worker.RetryableError
	err := worker.PreferSameWorker(worker.CoolDownKey(worker.RetryAfter(base, 3*time.Second), time.Minute))
	if !errors.As(err, &r) || r.RetryAfter != 3*time.Second || !r.PreferSameWorker || r.CoolDownKey != time.Minute || r.CoolDownBucket != 0 {
		t.Fatalf("PreferSameWorker(CoolDownKey(RetryAfter(err, 3s), 1m)) = %#v", r)
	}
	if !errors.Is(err, base) {
		t.Fatal("the wrapped error is lost")
	}
	// A Fail carries one cooldown: the last helper's scope wins.
	err = worker.CoolDownBucket(worker.CoolDownKey(base, time.Minute), 2*time.Minute)
	if !errors.As(err, &r) || r.CoolDownKey != 0 || r.CoolDownBucket != 2*time.Minute {
		t.Fatalf("CoolDownBucket(CoolDownKey(err, 1m), 2m) = %#v", r)
	}
}

func TestTheFailRequestCarriesTheCooldown(t *testing.T) {
	task := tbtest.NewTask("calls", nil).Task
	req := worker.FailRequestFor(context.Background(), task, worker.CoolDownKey(errors.New("429"), 90*time.Second))
	if c := req.GetCooldown(); c.GetScope() != pb.CooldownScope_COOLDOWN_SCOPE_CONCURRENCY_KEY || c.GetDuration().AsDuration() != 90*time.Second {
		t.Fatalf("key cooldown %v", c)
	}
	req = worker.FailRequestFor(context.Background(), task, worker.CoolDownBucket(errors.New("quota"), time.Second))
	if c := req.GetCooldown(); c.GetScope() != pb.CooldownScope_COOLDOWN_SCOPE_BUCKET || c.GetDuration().AsDuration() != time.Second {
		t.Fatalf("bucket cooldown %v", c)
	}
	if req := worker.FailRequestFor(context.Background(), task, errors.New("plain")); req.GetCooldown() != nil {
		t.Fatalf("a plain failure sends a cooldown: %v", req.GetCooldown())
	}
}
