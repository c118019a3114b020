// Package worker runs handlers for leased tasks: it leases only as many tasks as it has
// free slots, heartbeats every running lease in one batched call, and settles each task
// with Complete or Fail from the handler's result.
//
//	w, _ := worker.New(conn, worker.Config{Queues: []string{"emails"}}, handle)
//	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM) // drain on SIGTERM
//	defer stop()
//	err := w.Run(ctx) // nil after ctx ends and running handlers have finished
//
// Defaults follow docs/client-spec.md (see the Default* constants).
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// Handler does the work of one task. A nil error completes the task with result; an error
// fails the attempt (see Permanent and RetryAfter). ctx is cancelled when the lease is lost,
// an operator cancels the task, the task's deadline passes or a stop times out; see
// context.Cause and the Err* values.
type Handler func(ctx context.Context, task *Task) (result []byte, err error)

// Config says what a Worker leases and how.
type Config struct {
	// Queues to lease from, at least one.
	Queues []string
	// WorkerID names this worker in the broker's attempts. Default: "<hostname>-<pid>".
	WorkerID string
	// Labels say what this worker is ({"gpu": "a100", "region": "eu"}), sent with every
	// Lease: a task targeted at labels goes only to a worker carrying every pair. At most 32.
	Labels map[string]string
	// Concurrency is how many handlers run at once. Default 4.
	Concurrency int
	// QueueConcurrency caps, by queue, how many of its tasks run at once within Concurrency
	// (Mux.HandlePolicy's Policy.Concurrency fills it); the worker leases no more of them.
	QueueConcurrency map[string]int
	// LeaseDuration is asked for on Lease and used as the extension on every heartbeat.
	// Heartbeats go out every third of it. Default 30 s (the broker's default).
	LeaseDuration time.Duration
	// PollWait is the Lease long-poll wait, 0 to 60 s. Default 10 s.
	PollWait time.Duration
	// StopTimeout bounds the drain after Run's context ends: then running handlers' contexts
	// are cancelled with ErrStopTimeout; a handler still running StopGrace later is left
	// behind and its task handed back (Fail, retry_after 0: READY at once), and Run returns
	// within StopTimeout + StopMargin. Default 30 s; negative waits however long they take.
	StopTimeout time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// DisableLeaseNext turns off leasing through settles. By default a finished task's
	// Complete or Fail also leases the next task for the slot it frees (lease_next, no
	// wait), which runs like a leased one: two calls per task instead of three. When none
	// comes back, the long-poll Lease goes on. Never asked for once Run's context has ended.
	DisableLeaseNext bool
	// Middleware wraps every handler call, the first outermost (see Middleware).
	Middleware []Middleware
	// MeterProvider gives the meter "taskbroker" of the worker's OpenTelemetry instruments
	// (taskbroker.worker.tasks, .task.duration, .leases.lost, .settle.retries, .settle.calls).
	// Default otel.GetMeterProvider(): nothing is recorded until the application installs an
	// SDK.
	MeterProvider metric.MeterProvider
	// FailFast makes Run return at once, with a *StoppedError saying why in one line, when a
	// call fails with an error that retrying cannot fix before any call has gone through: a
	// TLS handshake failure, plaintext against a TLS port or TLS against a plaintext one, a
	// port that is not gRPC, UNAUTHENTICATED or PERMISSION_DENIED (see ConfigError). Without
	// it a worker retries such errors with backoff, as any other UNAVAILABLE, until its context
	// ends (a broker that is still starting looks the same).
	FailFast bool
}

// Worker leases tasks and runs a Handler on each. Create it with New, run it with Run.
type Worker struct {
	cfg     Config
	broker  pb.BrokerServiceClient
	handler Handler
	log     *slog.Logger

	limits  *queueLimits // Config.QueueConcurrency; nil without it
	mu      sync.Mutex   // guards running and stopCause: the lease loop, task goroutines and heartbeats share it
	running map[string]*Task
	// stopCause is set once the drain timed out: a task a settle brings after that is
	// cancelled at once, like the ones running then.
	stopCause error

	leaseNextTasks atomic.Int64
	metrics        *metrics
	completer      *completer
	// connected: a Lease has gone through (FailFast applies before that).
	connected bool

	// settleCtx ends when a stop's margin runs out: settles still retried then are abandoned.
	settleCtx      context.Context
	abandonSettles context.CancelFunc
}

// LeaseNextTasks is how many tasks came back in a settle's next_tasks (and ran) so far.
func (w *Worker) LeaseNextTasks() int64 { return w.leaseNextTasks.Load() }

// New checks cfg, fills in its defaults and returns a Worker on conn.
func New(conn grpc.ClientConnInterface, cfg Config, handler Handler) (*Worker, error) {
	if len(cfg.Queues) == 0 {
		return nil, errors.New("worker: Config.Queues is empty")
	}
	if handler == nil {
		return nil, errors.New("worker: handler is nil")
	}
	if cfg.WorkerID == "" {
		host, _ := os.Hostname()
		cfg.WorkerID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if len(cfg.Labels) > MaxLabels {
		return nil, fmt.Errorf("worker: Config.Labels has %d labels, at most %d", len(cfg.Labels), MaxLabels)
	}
	cfg.Labels = maps.Clone(cfg.Labels) // the caller may change its map later
	if cfg.Concurrency > 256 {
		return nil, errors.New("worker: Config.Concurrency is above 256, the broker's max_tasks")
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.LeaseDuration < time.Second {
		return nil, errors.New("worker: Config.LeaseDuration is below the broker's 1 s minimum")
	}
	if cfg.PollWait == 0 {
		cfg.PollWait = DefaultPollWait
	}
	if cfg.PollWait < 0 || cfg.PollWait > time.Minute {
		return nil, errors.New("worker: Config.PollWait is outside 0 to 60 s")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Middleware = slices.Clone(cfg.Middleware)
	m, err := newMetrics(cfg.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("worker: metrics: %w", err)
	}
	settleCtx, abandonSettles := context.WithCancel(context.Background())
	w := &Worker{
		settleCtx:      settleCtx,
		abandonSettles: abandonSettles,
		cfg:            cfg,
		broker:         pb.NewBrokerServiceClient(conn),
		handler:        chain(handler, cfg.Middleware),
		log:            cfg.Logger.With("worker_id", cfg.WorkerID),
		running:        map[string]*Task{},
		metrics:        m,
		limits:         newQueueLimits(cfg.QueueConcurrency),
	}
	w.completer = &completer{w: w}
	return w, nil
}

// QueuedCompletions is how many Completes wait for the settle call in flight; they go
// together as one CompleteMany when it returns.
func (w *Worker) QueuedCompletions() int { return w.completer.queued() }

// Run leases and handles tasks until ctx ends, then stops leasing, lets running handlers
// finish (see Config.StopTimeout), reports their results and returns nil. When the broker
// refuses the Lease with a code retrying cannot fix (a wrong token, a bad queue name; see
// StopsWorker) it stops the same way and returns a *StoppedError wrapping that status.
//
// Handlers get a context derived from ctx (its values, not its cancellation: a stop lets them
// finish). A Lease long poll in flight when ctx ends is cancelled; a task the broker granted in
// that instant is not seen and returns to the queue when its lease expires.
func (w *Worker) Run(ctx context.Context) error {
	// Heartbeats outlive ctx: draining handlers still need their leases kept.
	hbCtx, stopHeartbeats := context.WithCancel(context.WithoutCancel(ctx))
	hbDone := make(chan struct{})
	go func() { defer close(hbDone); w.heartbeatLoop(hbCtx) }()

	var wg sync.WaitGroup
	stopErr := w.leaseLoop(ctx, &wg)

	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	if w.cfg.StopTimeout >= 0 {
		select {
		case <-drained:
		case <-time.After(w.cfg.StopTimeout):
			// Bounded by StopTimeout + StopMargin whatever the handlers or the broker do.
			w.cancelRunning(ErrStopTimeout)
			margin := time.NewTimer(StopMargin)
			defer margin.Stop()
			select {
			case <-drained:
			case <-time.After(StopGrace):
				w.handBackRunning()
				select {
				case <-drained:
				case <-margin.C:
				}
			}
			w.abandonSettles()
		}
	} else {
		<-drained
	}
	stopHeartbeats()
	<-hbDone
	if stopErr != nil {
		w.log.Error("worker stopped", "err", stopErr)
	}
	return stopErr
}

// leaseLoop holds one slot token per running handler in slots, so a Lease never asks for
// more tasks than there are free slots.
func (w *Worker) leaseLoop(ctx context.Context, wg *sync.WaitGroup) error {
	slots := make(chan struct{}, w.cfg.Concurrency)
	handlerCtx := context.WithoutCancel(ctx)
	failures := 0
	for {
		// Block until at least one slot is free (or we are stopping).
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		free := 1
	more:
		for free < w.cfg.Concurrency {
			select {
			case slots <- struct{}{}:
				free++
			default:
				break more
			}
		}

		queues, n, got := w.limits.reserve(w.cfg.Queues, free)
		if n == 0 { // every queue is at its own limit: wait for one to free a slot
			for range free {
				<-slots
			}
			select {
			case <-w.limits.wait():
			case <-ctx.Done():
				return nil
			}
			continue
		}
		tasks, err := w.lease(ctx, queues, n)
		got(tasks)
		for range free - len(tasks) {
			<-slots
		}
		for _, lt := range tasks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				// The slot stays this goroutine's while settles bring more tasks (lease_next).
				queue := []*pb.LeasedTask{lt}
				for len(queue) > 0 {
					next := w.handle(ctx, handlerCtx, queue[0])
					w.limits.pass(queue[0].GetQueue(), next)
					w.leaseNextTasks.Add(int64(len(next)))
					queue = append(queue[1:], next...)
				}
			}()
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if StopsWorker(err) {
				return &StoppedError{Err: err}
			}
			if w.cfg.FailFast && !w.connected {
				if why, ok := ConfigError(err); ok {
					return &StoppedError{Err: err, why: why}
				}
			}
			pause := Backoff(failures)
			failures++
			w.log.Warn("lease failed; retrying", "err", err, "after", pause)
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		failures = 0
		w.connected = true
	}
}

func (w *Worker) lease(ctx context.Context, queues []string, n int) ([]*pb.LeasedTask, error) {
	// The call's own deadline must leave room for the long poll.
	callCtx, cancel := context.WithTimeout(ctx, w.cfg.PollWait+LeaseMargin)
	defer cancel()
	resp, err := w.broker.Lease(callCtx, &pb.LeaseRequest{
		WorkerId:      w.cfg.WorkerID,
		Queues:        queues,
		MaxTasks:      uint32(n),
		LeaseDuration: durationpb.New(w.cfg.LeaseDuration),
		Wait:          durationpb.New(w.cfg.PollWait),
		Labels:        w.cfg.Labels,
	})
	if err != nil {
		return nil, err
	}
	return resp.GetTasks(), nil
}

// Config is the worker's configuration with the defaults filled in.
func (w *Worker) Config() Config { return w.cfg }

// handBackRunning hands back, in parallel, every task whose handler is still running; the
// handlers are left behind (a goroutine cannot be killed) and their results discarded.
func (w *Worker) handBackRunning() {
	w.mu.Lock()
	var tasks []*Task
	for _, t := range w.running {
		if t.takeForHandBack() {
			tasks = append(tasks, t)
		}
	}
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, t := range tasks {
		wg.Add(1)
		go func() { defer wg.Done(); w.handBack(t) }()
	}
	wg.Wait()
}

func (w *Worker) cancelRunning(cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopCause = cause
	for _, t := range w.running {
		t.cancel(cause)
	}
}
