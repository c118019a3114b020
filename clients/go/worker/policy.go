package worker

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// Policy is a queue's policy, declared with its handler (Mux.HandlePolicy; docs/client-spec.md
// point 20). Zero fields are unset.
type Policy struct {
	// MaxAttempts, Backoff, BackoffMultiplier and MaxBackoff fill what the retry of each task
	// submitted on a connection dialled with taskbroker.WithRetryDefaults(mux.RetryDefaults())
	// leaves unset: the spec's own retry wins, then these, then the broker's
	// [queues.NAME] retry, then its [retry].
	MaxAttempts       uint32
	Backoff           time.Duration
	BackoffMultiplier float64
	MaxBackoff        time.Duration
	// NonRetryable errors fail the attempt for good (a non-retryable Fail: the task goes DEAD),
	// whoever submitted it: an error matching any of these (IsError, AsError).
	NonRetryable []func(error) bool
	// Concurrency caps how many of the queue's tasks the Mux's workers run at once (within
	// Config.Concurrency): Config.QueueConcurrency.
	Concurrency int
}

// IsError matches errors that errors.Is target.
func IsError(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

// AsError matches errors of type E anywhere in the chain (errors.As).
func AsError[E error]() func(error) bool {
	return func(err error) bool {
		var e E
		return errors.As(err, &e)
	}
}

// Retry is the policy's retry defaults (nil when none is set).
func (p Policy) Retry() *pb.RetryPolicy {
	r := &pb.RetryPolicy{MaxAttempts: p.MaxAttempts, BackoffMultiplier: p.BackoffMultiplier}
	if p.Backoff > 0 {
		r.InitialBackoff = durationpb.New(p.Backoff)
	}
	if p.MaxBackoff > 0 {
		r.MaxBackoff = durationpb.New(p.MaxBackoff)
	}
	if r.MaxAttempts == 0 && r.BackoffMultiplier == 0 && r.InitialBackoff == nil && r.MaxBackoff == nil {
		return nil
	}
	return r
}

// classify makes err permanent when it matches a NonRetryable entry.
func (p Policy) classify(err error) error {
	var perm *PermanentError
	if err == nil || errors.As(err, &perm) {
		return err
	}
	for _, match := range p.NonRetryable {
		if match(err) {
			return Permanent(err)
		}
	}
	return err
}

// HandlePolicy registers h for queue, as Handle, under p: its retry defaults go into
// RetryDefaults, its NonRetryable errors fail the attempt for good.
func (m *Mux) HandlePolicy(queue string, h Handler, p Policy) {
	if h != nil && len(p.NonRetryable) > 0 {
		inner := h
		h = func(ctx context.Context, t *Task) ([]byte, error) {
			r, err := inner(ctx, t)
			return r, p.classify(err)
		}
	}
	m.Handle(queue, h)
	m.RetryDefaults().Set(queue, p.Retry())
	if p.Concurrency > 0 {
		if m.slots == nil {
			m.slots = map[string]int{}
		}
		m.slots[queue] = p.Concurrency
	}
}

// RetryDefaults is the table of the retry defaults of the Mux's queues: dial the producer's
// connection with taskbroker.WithRetryDefaults(mux.RetryDefaults()).
func (m *Mux) RetryDefaults() *taskbroker.RetryDefaults {
	if m.defaults == nil {
		m.defaults = taskbroker.NewRetryDefaults()
	}
	return m.defaults
}

// HandleTask registers fn for def's queue (JSON payload P, JSON result R), under p if given
// (and def.Retry filling what p's retry leaves unset).
func HandleTask[P, R any](m *Mux, def taskbroker.TaskDef[P, R], fn TypedFunc[P, R], p ...Policy) {
	var pol Policy
	if len(p) > 0 {
		pol = p[0]
	}
	m.HandlePolicy(def.Queue, HandleJSON(fn), pol)
	if r := taskbroker.MergeRetry(pol.Retry(), def.Retry); r != nil {
		m.RetryDefaults().Set(def.Queue, r)
	}
}
