package worker

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
// retrying cannot fix (see StopsWorker), or, with Config.FailFast, when the first calls met a
// configuration that is wrong for good (see ConfigError); Err is the gRPC status error.
type StoppedError struct {
	Err error
	why string
}

func (e *StoppedError) Error() string {
	why := e.why
	if why == "" {
		why, _ = ConfigError(e.Err)
	}
	if why == "" {
		why = "lease refused: " + firstLine(e.Err.Error())
	}
	return "taskbroker: worker stopped: " + why
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
// retried; use this only to set RetryAfter, PreferSameWorker or a cooldown.
type RetryableError struct {
	Err        error
	RetryAfter time.Duration
	// PreferSameWorker asks the broker to keep the retry for this worker (its local files
	// are here): FailRequest.prefer_same_worker, SOFT unless the task's sticky policy is HARD.
	PreferSameWorker bool
	// CoolDownKey, above zero, holds the task's concurrency key in its queue for this long
	// (e.g. a 429's Retry-After): no task of the key is leased before then, on any replica,
	// and this task's retry waits at least as long (FailRequest.cooldown, scope
	// CONCURRENCY_KEY; at most the broker's max_cooldown, one hour by default).
	CoolDownKey time.Duration
	// CoolDownBucket is the same for the task's limit bucket (scope BUCKET). Set one of the
	// two; CoolDownKey wins when both are.
	CoolDownBucket time.Duration
}

func (e *RetryableError) Error() string { return e.Err.Error() }
func (e *RetryableError) Unwrap() error { return e.Err }

// RetryAfter wraps err so the next attempt runs after d (overriding the retry policy).
func RetryAfter(err error, d time.Duration) error { return &RetryableError{Err: err, RetryAfter: d} }

// retryable wraps err in a RetryableError that keeps what an inner *RetryableError of err
// asked for, so the helpers below combine: CoolDownKey(RetryAfter(err, d), d).
func retryable(err error) *RetryableError {
	r := &RetryableError{Err: err}
	var inner *RetryableError
	if errors.As(err, &inner) {
		r.RetryAfter, r.PreferSameWorker = inner.RetryAfter, inner.PreferSameWorker
		r.CoolDownKey, r.CoolDownBucket = inner.CoolDownKey, inner.CoolDownBucket
	}
	return r
}

// PreferSameWorker wraps err so its retry is reserved for this worker (routing).
// It keeps what an err that is already a *RetryableError asked for (RetryAfter, a cooldown).
//
//	return nil, worker.PreferSameWorker(fmt.Errorf("render: %w", err))
func PreferSameWorker(err error) error {
	r := retryable(err)
	r.PreferSameWorker = true
	return r
}

// CoolDownKey wraps err so the Fail holds the task's concurrency key for d (see
// RetryableError.CoolDownKey). It keeps what an inner *RetryableError asked for, but not its
// bucket cooldown: a Fail carries one cooldown.
//
//	if resp.StatusCode == http.StatusTooManyRequests {
//		return nil, worker.CoolDownKey(errors.New("429 from the partner API"), retryAfter)
//	}
func CoolDownKey(err error, d time.Duration) error {
	r := retryable(err)
	r.CoolDownKey, r.CoolDownBucket = d, 0
	return r
}

// CoolDownBucket wraps err so the Fail holds the task's limit bucket for d (see
// RetryableError.CoolDownBucket), as CoolDownKey does for the key.
func CoolDownBucket(err error, d time.Duration) error {
	r := retryable(err)
	r.CoolDownKey, r.CoolDownBucket = 0, d
	return r
}

// ConfigError reports whether err, from a call, says the connection's configuration is wrong
// for good, and why in one plain line: the TLS handshake failed (a certificate not trusted, a
// TLS client against a plaintext port: "first record does not look like a TLS handshake"),
// the server did not speak HTTP/2 (plaintext against a TLS port, or not a gRPC server at
// all), an answer without a grpc-status (an HTTP server), UNAUTHENTICATED or
// PERMISSION_DENIED. Config.FailFast stops a worker on these.
func ConfigError(err error) (why string, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus || err == nil {
		return "", false
	}
	msg := firstLine(st.Message())
	if strings.Contains(msg, "unexpected HTTP status code") || strings.Contains(msg, "unexpected content-type") ||
		strings.Contains(msg, "malformed header") {
		return "the address answers HTTP, not gRPC: " + msg, true
	}
	switch st.Code() {
	case codes.Unauthenticated:
		return "the broker refused the credentials (UNAUTHENTICATED): " + msg, true
	case codes.PermissionDenied:
		return "the broker refused the call (PERMISSION_DENIED): " + msg, true
	case codes.Unavailable:
		switch {
		case strings.Contains(msg, "first record does not look like a TLS handshake"):
			return "TLS is on but the broker's port is plaintext: " + msg, true
		case strings.Contains(msg, "authentication handshake failed") || strings.Contains(msg, "tls: ") ||
			strings.Contains(msg, "x509: "):
			return "the TLS handshake failed: " + msg, true
		case strings.Contains(msg, "server preface"):
			return "the address does not speak gRPC over plaintext HTTP/2 (a TLS port, or not a gRPC server): " + msg, true
		}
	}
	return "", false
}

// firstLine is s up to its first line break: a status may carry a whole HTML page.
func firstLine(s string) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		return s[:i]
	}
	return s
}
