package tbtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/tbtest"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

type importJob struct {
	Rows int `json:"rows"`
}

type imported struct {
	Rows        int `json:"rows"`
	ResumedFrom int `json:"resumed_from"`
}

// importRows checkpoints after every row and resumes from the last checkpoint.
func importRows(ctx context.Context, t *worker.Task, job importJob) (imported, error) {
	done := 0
	if cp, ok := t.LastCheckpoint(); ok {
		done, _ = strconv.Atoi(string(cp))
	}
	if job.Rows < 0 {
		return imported{}, worker.Permanentf("negative row count %d", job.Rows)
	}
	for row := done; row < job.Rows; row++ {
		if ctx.Err() != nil {
			return imported{}, context.Cause(ctx)
		}
		if err := t.Checkpoint(ctx, []byte(strconv.Itoa(row+1))); err != nil {
			return imported{}, err
		}
	}
	if t.GetMetadata()["flaky"] != "" && t.GetAttempt() < 2 {
		return imported{}, worker.RetryAfter(errors.New("upstream busy"), 5*time.Second)
	}
	return imported{Rows: job.Rows, ResumedFrom: done}, nil
}

func payload(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAHandlerRunsOnATestTaskWithNoBroker(t *testing.T) {
	h := worker.HandleJSON(importRows)

	tt := tbtest.NewTask("imports", payload(t, importJob{3}), tbtest.WithAttempt(2), tbtest.WithCheckpoint([]byte("1")),
		tbtest.WithMetadata(map[string]string{"tenant": "a"}))
	if tt.Task.GetAttempt() != 2 || tt.Task.GetQueue() != "imports" || tt.Task.GetMetadata()["tenant"] != "a" {
		t.Fatalf("task fields: %v", tt.Task.LeasedTask)
	}
	out := tt.Run(h)
	if !out.Succeeded() || string(out.Result) != `{"rows":3,"resumed_from":1}` {
		t.Fatalf("outcome %+v", out)
	}
	if got := fmt.Sprintf("%s", tt.Checkpoints()); got != "[2 3]" {
		t.Fatalf("checkpoints %s", got)
	}
	if tt.CancelChecks() != 2 {
		t.Fatalf("cancel checks %d, want 2", tt.CancelChecks())
	}
	if cp, _ := tt.Task.LastCheckpoint(); string(cp) != "3" || tt.Outcome() == nil {
		t.Fatalf("last checkpoint %q", cp)
	}

	out = tbtest.NewTask("imports", payload(t, importJob{1}), tbtest.WithMetadata(map[string]string{"flaky": "1"})).Run(h)
	if !out.Retryable || out.RetryAfter != 5*time.Second || out.ErrorMessage != "upstream busy" {
		t.Fatalf("retry-after outcome %+v", out)
	}
	if out := tbtest.NewTask("imports", payload(t, importJob{-1})).Run(h); !out.Permanent() {
		t.Fatalf("a permanent error is not permanent: %+v", out)
	}
	if out := tbtest.NewTask("imports", []byte("not json")).Run(h); !out.Permanent() {
		t.Fatalf("a payload that does not decode is not permanent: %+v", out)
	}

	// An operator's cancel comes in a checkpoint's answer.
	tt = tbtest.NewTask("imports", payload(t, importJob{5}), tbtest.CancelAtCheckpoint(2))
	out = tt.Run(h)
	if !errors.Is(out.Err, worker.ErrCancelRequested) || len(tt.Checkpoints()) != 2 {
		t.Fatalf("cancel: %+v, %d checkpoints", out, len(tt.Checkpoints()))
	}
	tt = tbtest.NewTask("imports", payload(t, importJob{5}), tbtest.LoseLeaseAtCheckpoint(1))
	if out := tt.Run(h); !errors.Is(out.Err, worker.ErrLeaseLost) || !out.LeaseLost || !tt.Task.Lost() {
		t.Fatalf("lease lost: %+v", out)
	}
	// After a stop timeout a failure hands the task back: retry at once.
	out = tbtest.NewTask("imports", payload(t, importJob{5}), tbtest.Cancelled(worker.ErrStopTimeout)).Run(h)
	if !out.Retryable || !out.HasRetryAfter || out.RetryAfter != 0 {
		t.Fatalf("stop timeout: %+v", out)
	}

	// Called directly, the handler returns what it returns under the worker; a panic is retryable.
	tt = tbtest.NewTask("imports", payload(t, importJob{-1}))
	var perm *worker.PermanentError
	if _, err := h(tt.Context(), tt.Task); !errors.As(err, &perm) {
		t.Fatalf("direct call: %v", err)
	}
	out = tbtest.NewTask("x", nil).Run(func(context.Context, *worker.Task) ([]byte, error) { panic("boom") })
	if !out.Retryable || out.ErrorMessage != "handler panicked: boom" {
		t.Fatalf("panic: %+v", out)
	}
}

func TestAProducerAndAWorkerRunOnTheFakeBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	mux := worker.NewMux()
	mux.Handle("imports", worker.HandleJSON(importRows))
	fake := tbtest.NewBroker()
	fake.HandleMux(mux)

	// Attempt 1 checkpoints both rows and fails; attempt 2 resumes from its checkpoint.
	res, err := taskbroker.SubmitJSON(ctx, fake.Broker(), "imports", importJob{2},
		taskbroker.WithMetadata(map[string]string{"flaky": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	task, err := taskbroker.Wait(ctx, fake.Admin(), res.GetTaskId())
	if err != nil {
		t.Fatal(err)
	}
	got, err := taskbroker.ResultJSON[imported](task)
	if err != nil || got != (imported{Rows: 2, ResumedFrom: 2}) || task.GetAttempt() != 2 {
		t.Fatalf("result %+v (%v), attempt %d", got, err, task.GetAttempt())
	}
	if outs := fake.Outcomes(task.GetId()); len(outs) != 2 || !outs[0].Retryable || !outs[1].Succeeded() {
		t.Fatalf("outcomes %+v", outs)
	}

	// A permanent error: one attempt, DEAD; Wait returns *TaskFailedError.
	res, _ = taskbroker.SubmitJSON(ctx, fake.Broker(), "imports", importJob{-1})
	_, err = taskbroker.Wait(ctx, fake.Admin(), res.GetTaskId())
	var failed *taskbroker.TaskFailedError
	if !errors.As(err, &failed) || failed.State != pb.TaskState_TASK_STATE_DEAD || fake.Task(res.GetTaskId()).GetAttempt() != 1 {
		t.Fatalf("permanent: %v", err)
	}

	// Retryable failures until max_attempts.
	fake.Handle("down", func(context.Context, *worker.Task) ([]byte, error) { return nil, errors.New("unreachable") })
	task, err = taskbroker.SubmitAndWait(ctx, fake.Broker(), fake.Admin(), &pb.TaskSpec{Queue: "down", Retry: &pb.RetryPolicy{MaxAttempts: 4}})
	if !errors.As(err, &failed) || task.GetAttempt() != 4 || task.GetLastError() != "unreachable" {
		t.Fatalf("max attempts: %v, %v", err, task)
	}

	// Keys deduplicate; a queue with no handler waits.
	a, _ := taskbroker.Submit(ctx, fake.Broker(), &pb.TaskSpec{Queue: "imports", Key: "k", Payload: []byte(`{"rows":0}`)})
	b, _ := taskbroker.Submit(ctx, fake.Broker(), &pb.TaskSpec{Queue: "imports", Key: "k", Payload: []byte(`{"rows":0}`)})
	if !b[0].GetDeduplicated() || a[0].GetTaskId() != b[0].GetTaskId() {
		t.Fatalf("dedup: %v %v", a, b)
	}
	later, _ := taskbroker.Submit(ctx, fake.Broker(), &pb.TaskSpec{Queue: "later"})
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	defer stop()
	var timeout *taskbroker.WaitTimeoutError
	if _, err := taskbroker.Wait(short, fake.Admin(), later[0].GetTaskId()); !errors.As(err, &timeout) {
		t.Fatalf("no handler: %v", err)
	}
	fake.Handle("later", func(context.Context, *worker.Task) ([]byte, error) { return []byte("ran"), nil })
	if n := fake.RunPending(ctx); n != 1 || string(fake.Task(later[0].GetTaskId()).GetResult()) != "ran" {
		t.Fatalf("run pending: %d", n)
	}
}

func TestASubmittedCheckpointIsTheFirstAttemptsCheckpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fake := tbtest.NewBroker()
	fake.Handle("seeded", func(_ context.Context, task *worker.Task) ([]byte, error) {
		if cp, ok := task.LastCheckpoint(); ok {
			return cp, nil
		}
		return []byte("none"), nil
	})
	seeded, err := taskbroker.SubmitAndWait(ctx, fake.Broker(), fake.Admin(), &pb.TaskSpec{Queue: "seeded", Checkpoint: []byte("row=7")})
	if err != nil || string(seeded.GetResult()) != "row=7" || seeded.GetAttempt() != 1 {
		t.Fatalf("seeded: %v, result %q, attempt %d", err, seeded.GetResult(), seeded.GetAttempt())
	}
	plain, err := taskbroker.SubmitAndWait(ctx, fake.Broker(), fake.Admin(), &pb.TaskSpec{Queue: "seeded"})
	if err != nil || string(plain.GetResult()) != "none" {
		t.Fatalf("plain: %v, result %q", err, plain.GetResult())
	}
}

func TestATestTaskRecordsTheCooldownAHandlerAsksFor(t *testing.T) {
	limited := func(context.Context, *worker.Task) ([]byte, error) {
		return nil, worker.CoolDownKey(errors.New("429 Too Many Requests"), 90*time.Second)
	}
	out := tbtest.NewTask("calls", nil, tbtest.WithKey("k")).Run(limited)
	if !out.Retryable || out.CoolDownKey != 90*time.Second || out.CoolDownBucket != 0 || out.ErrorMessage != "429 Too Many Requests" {
		t.Fatalf("key cooldown outcome %+v", out)
	}
	full := func(context.Context, *worker.Task) ([]byte, error) {
		return nil, worker.CoolDownBucket(worker.RetryAfter(errors.New("quota"), time.Second), 2500*time.Millisecond)
	}
	out = tbtest.NewTask("calls", nil).Run(full)
	if out.CoolDownKey != 0 || out.CoolDownBucket != 2500*time.Millisecond || out.RetryAfter != time.Second {
		t.Fatalf("bucket cooldown outcome %+v", out)
	}
	plain := func(context.Context, *worker.Task) ([]byte, error) { return nil, errors.New("plain") }
	if out := tbtest.NewTask("calls", nil).Run(plain); out.CoolDownKey != 0 || out.CoolDownBucket != 0 {
		t.Fatalf("a plain failure asked for a cooldown: %+v", out)
	}
}
