package main

// The client-library cases of SCENARIO.md (docs/client-spec.md points 1 to 7): they drive the
// worker package and the taskbroker package rather than the raw stubs.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	"github.com/taskbroker/taskbroker/clients/go/rpcerr"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

const (
	traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	traceParent = "00-" + traceID + "-00f067aa0ba902b7-01"
)

var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

func newWorker(e *env, q string, cfg worker.Config, h worker.Handler) (*worker.Worker, error) {
	cfg.Queues = []string{q}
	cfg.WorkerID = workerID
	if cfg.PollWait == 0 {
		cfg.PollWait = time.Second
	}
	cfg.Logger = quiet
	return worker.New(e.conn, cfg, h)
}

func submit(ctx context.Context, e *env, spec *pb.TaskSpec) (string, error) {
	resp, err := e.broker.Submit(ctx, &pb.SubmitRequest{Tasks: []*pb.TaskSpec{spec}})
	if err != nil {
		return "", fmt.Errorf("Submit: %w", err)
	}
	return resp.GetResults()[0].GetTaskId(), nil
}

// waitState polls GetTask until the task is in want or ctx ends.
func waitState(ctx context.Context, e *env, id string, want pb.TaskState) (*pb.Task, error) {
	for {
		t, err := getTask(ctx, e, id)
		if err != nil || t.GetState() == want {
			return t, err
		}
		select {
		case <-ctx.Done():
			return t, nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func specDefaults(_ context.Context, e *env, q string) error {
	w, err := worker.New(e.conn, worker.Config{Queues: []string{q}}, func(context.Context, *worker.Task) ([]byte, error) { return nil, nil })
	if err != nil {
		return err
	}
	got := w.Config()
	if got.Concurrency != 4 || got.PollWait != 10*time.Second || got.LeaseDuration != 30*time.Second ||
		worker.HeartbeatInterval(got.LeaseDuration) != 10*time.Second || got.StopTimeout != 30*time.Second {
		return fmt.Errorf("defaults %d %v %v %v %v, want 4 10s 30s 10s 30s", got.Concurrency, got.PollWait,
			got.LeaseDuration, worker.HeartbeatInterval(got.LeaseDuration), got.StopTimeout)
	}
	if c0, c10 := worker.BackoffCeiling(0), worker.BackoffCeiling(10); c0 != 200*time.Millisecond || c10 != 10*time.Second {
		return fmt.Errorf("backoff ceilings %v %v, want 200ms 10s", c0, c10)
	}
	seen := map[time.Duration]bool{}
	for range 50 {
		d := worker.Backoff(3)
		if d < 160*time.Millisecond || d > 1600*time.Millisecond {
			return fmt.Errorf("Backoff(3) = %v, outside [160ms, 1.6s]", d)
		}
		seen[d] = true
	}
	if len(seen) < 2 {
		return errors.New("Backoff(3) has no jitter")
	}
	for _, c := range []codes.Code{codes.Unauthenticated, codes.PermissionDenied, codes.InvalidArgument, codes.Unimplemented} {
		if !worker.StopsWorker(status.Error(c, "x")) {
			return fmt.Errorf("StopsWorker(%v) = false", c)
		}
	}
	if worker.StopsWorker(status.Error(codes.Unavailable, "x")) {
		return errors.New("StopsWorker(UNAVAILABLE) = true")
	}
	return nil
}

func leaseLostReason(ctx context.Context, e *env, q string) error {
	t, err := submitAndLease(ctx, e, &pb.TaskSpec{Queue: q}, 30*time.Second)
	if err != nil {
		return err
	}
	_, err = e.broker.Complete(ctx, &pb.CompleteRequest{TaskId: t.GetTaskId(), LeaseToken: "stale"})
	if !rpcerr.IsLeaseLost(err) {
		return fmt.Errorf("IsLeaseLost false for the broker's answer %v", err)
	}
	if rpcerr.IsLeaseLost(status.Error(codes.Aborted, "aborted for another reason")) {
		return errors.New("IsLeaseLost true for a bare ABORTED")
	}
	return nil
}

func checkpointExtends(ctx context.Context, e *env, q string) error {
	id, err := submit(ctx, e, &pb.TaskSpec{Queue: q})
	if err != nil {
		return err
	}
	var leased, after time.Time
	w, err := newWorker(e, q, worker.Config{LeaseDuration: 4 * time.Second}, func(hctx context.Context, t *worker.Task) ([]byte, error) {
		leased = t.LeaseExpiry()
		time.Sleep(100 * time.Millisecond)
		if err := t.Checkpoint(hctx, []byte("half")); err != nil {
			return nil, err
		}
		after = t.LeaseExpiry()
		return []byte("ok"), nil
	})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	task, err := waitState(ctx, e, id, pb.TaskState_TASK_STATE_SUCCEEDED)
	stop()
	<-done
	if err != nil {
		return err
	}
	if task.GetState() != pb.TaskState_TASK_STATE_SUCCEEDED {
		return fmt.Errorf("state %v, want SUCCEEDED", task.GetState())
	}
	if !after.After(leased) {
		return fmt.Errorf("expiry %v -> %v: the checkpoint did not extend the lease", leased, after)
	}
	return nil
}

func deadlineCancels(ctx context.Context, e *env, q string) error {
	if _, err := submit(ctx, e, &pb.TaskSpec{Queue: q, Deadline: timestamppb.New(time.Now().Add(2 * time.Second))}); err != nil {
		return err
	}
	causes := make(chan error, 1)
	w, err := newWorker(e, q, worker.Config{}, func(hctx context.Context, _ *worker.Task) ([]byte, error) {
		select {
		case <-hctx.Done():
			causes <- context.Cause(hctx)
		case <-time.After(20 * time.Second):
			causes <- nil
		}
		return nil, errors.New("cancelled")
	})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { stop(); <-done }()
	select {
	case cause := <-causes:
		if !errors.Is(cause, worker.ErrDeadline) {
			return fmt.Errorf("handler cancelled with %v, want ErrDeadline", cause)
		}
		return nil
	case <-time.After(25 * time.Second):
		return errors.New("the handler never ran")
	}
}

func stopCodes(ctx context.Context, e *env, q string) error {
	runUntilStopped := func(w *worker.Worker) error {
		runCtx, stop := context.WithTimeout(ctx, 20*time.Second)
		defer stop()
		err := w.Run(runCtx)
		if runCtx.Err() != nil {
			return errors.New("the worker kept running")
		}
		return err
	}
	check := func(what string, err error, want codes.Code) error {
		var stopped *worker.StoppedError
		if !errors.As(err, &stopped) || status.Code(err) != want {
			return fmt.Errorf("%s: Run returned %v, want a StoppedError with %v", what, err, want)
		}
		return nil
	}
	nop := func(context.Context, *worker.Task) ([]byte, error) { return nil, nil }
	w, err := newWorker(e, "has space", worker.Config{}, nop)
	if err != nil {
		return err
	}
	if err := check("bad queue", runUntilStopped(w), codes.InvalidArgument); err != nil {
		return err
	}
	if os.Getenv("TASKBROKER_TOKEN") == "" {
		return nil
	}
	conn, err := taskbroker.NewClient(os.Getenv("TASKBROKER_ADDR"), taskbroker.FromEnv(), taskbroker.WithToken("wrong-token-0123456789"))
	if err != nil {
		return err
	}
	defer conn.Close()
	w, err = worker.New(conn, worker.Config{Queues: []string{q}, PollWait: time.Second, Logger: quiet}, nop)
	if err != nil {
		return err
	}
	return check("wrong token", runUntilStopped(w), codes.Unauthenticated)
}

func drainOnSigterm(ctx context.Context, e *env, q string) error {
	a, err := submit(ctx, e, &pb.TaskSpec{Queue: q, Payload: []byte("a")})
	if err != nil {
		return err
	}
	running, release := make(chan struct{}), make(chan struct{})
	w, err := newWorker(e, q, worker.Config{Concurrency: 1}, func(context.Context, *worker.Task) ([]byte, error) {
		close(running)
		<-release
		return []byte("done"), nil
	})
	if err != nil {
		return err
	}
	// The idiom of docs/client-spec.md: SIGTERM ends Run's context.
	sigCtx, stopSignals := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stopSignals()
	done := make(chan error, 1)
	go func() { done <- w.Run(sigCtx) }()
	select {
	case <-running:
	case <-time.After(20 * time.Second):
		return errors.New("the handler never ran")
	}
	b, err := submit(ctx, e, &pb.TaskSpec{Queue: q, Payload: []byte("b")})
	if err != nil {
		return err
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		return err
	}
	<-sigCtx.Done()
	close(release)
	if err := <-done; err != nil {
		return fmt.Errorf("Run returned %v after SIGTERM, want nil", err)
	}
	ta, err := getTask(ctx, e, a)
	if err != nil {
		return err
	}
	tb, err := getTask(ctx, e, b)
	if err != nil {
		return err
	}
	if ta.GetState() != pb.TaskState_TASK_STATE_SUCCEEDED || tb.GetState() != pb.TaskState_TASK_STATE_READY {
		return fmt.Errorf("a %v, b %v; want SUCCEEDED, READY", ta.GetState(), tb.GetState())
	}
	return nil
}

func traceContextPropagates(ctx context.Context, e *env, q string) error {
	tid, _ := trace.TraceIDFromHex(traceID)
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	id, err := submit(trace.ContextWithRemoteSpanContext(ctx, sc), e, &pb.TaskSpec{Queue: q})
	if err != nil {
		return err
	}
	task, err := getTask(ctx, e, id)
	if err != nil {
		return err
	}
	if tp := task.GetMetadata()["traceparent"]; tp != traceParent {
		return fmt.Errorf("metadata traceparent %q, want %q", tp, traceParent)
	}
	seen := make(chan string, 1)
	w, err := newWorker(e, q, worker.Config{}, func(hctx context.Context, _ *worker.Task) ([]byte, error) {
		seen <- trace.SpanContextFromContext(hctx).TraceID().String()
		return nil, nil
	})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { stop(); <-done }()
	select {
	case got := <-seen:
		if got != traceID {
			return fmt.Errorf("handler saw trace id %s, want %s", got, traceID)
		}
		return nil
	case <-time.After(20 * time.Second):
		return errors.New("the handler never ran")
	}
}
