package worker

import (
	"errors"
	"fmt"
	"time"
)

// Causes of a handler's context being cancelled; read them with context.Cause(ctx).
var (
	// ErrLeaseLost: the broker no longer holds the task for this worker (a heartbeat said
	// lost, a checkpoint answered LEASE_LOST, or the lease ran out without a successful
	// heartbeat). The worker reports nothing for the task; another attempt may be running.
	ErrLeaseLost = errors.New("taskbroker: lease lost")
	// ErrCancelRequested: an operator cancelled the task. Return an error promptly; the
	// worker reports Fail and the broker moves the task to CANCELLED.
	ErrCancelRequested = errors.New("taskbroker: cancel requested")
	// ErrStopTimeout: the worker is stopping and Config.StopTimeout has passed.
	ErrStopTimeout = errors.New("taskbroker: worker stop timeout")
	// ErrDeadline: the task's deadline has passed; the broker will not accept the work.
	ErrDeadline = errors.New("taskbroker: task deadline passed")
)

// StoppedError is what Run returns when the broker refused the worker's Lease with a code that
// retrying cannot fix (see StopsWorker); Err is the gRPC status error.
type StoppedError struct{ Err error }

func (e *StoppedError) Error() string {
	return "taskbroker: worker stopped: lease refused: " + e.Err.Error()
}
func (e *StoppedError) Unwrap() error { return e.Err }

// PermanentError marks a failure that retrying cannot fix: the worker reports Fail with
// non_retryable set and the task goes straight to DEAD.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so the task is not retried.
func Permanent(err error) error { return &PermanentError{Err: err} }

// Permanentf is Permanent(fmt.Errorf(format, args...)).
func Permanentf(format string, args ...any) error {
	return Permanent(fmt.Errorf(format, args...))
}

// RetryableError is a failure to retry after RetryAfter instead of the policy's backoff,
// and, with PreferSameWorker, on this worker. Any error that is not a PermanentError is
// retried; use this only to set RetryAfter or PreferSameWorker.
type RetryableError struct {
	Err        error
	RetryAfter time.Duration
	// PreferSameWorker asks the broker to keep the retry for this worker (its local files
	// are here): FailRequest.prefer_same_worker, SOFT unless the task's sticky policy is HARD.
	PreferSameWorker bool
}

func (e *RetryableError) Error() string { return e.Err.Error() }
func (e *RetryableError) Unwrap() error { return e.Err }

// RetryAfter wraps err so the next attempt runs after d (overriding the retry policy).
func RetryAfter(err error, d time.Duration) error { return &RetryableError{Err: err, RetryAfter: d} }

// PreferSameWorker wraps err so its retry is reserved for this worker (routing).
// It keeps the RetryAfter of an err that is already a *RetryableError.
//
//	return nil, worker.PreferSameWorker(fmt.Errorf("render: %w", err))
func PreferSameWorker(err error) error {
	r := &RetryableError{Err: err, PreferSameWorker: true}
	var inner *RetryableError
	if errors.As(err, &inner) {
		r.RetryAfter = inner.RetryAfter
	}
	return r
}
