package worker

import (
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MaxLabels is the most labels a worker may carry (LeaseRequest.labels).
const MaxLabels = 32

// The defaults of docs/client-spec.md, point 1; Config's zero values mean these.
const (
	DefaultConcurrency   = 4
	DefaultPollWait      = 10 * time.Second
	DefaultLeaseDuration = 30 * time.Second
	DefaultStopTimeout   = 30 * time.Second
	// StopGrace is how long handlers have to return once a stop timed out and cancelled
	// them; StopMargin bounds the rest of the stop (hand-backs and settles).
	StopGrace  = time.Second
	StopMargin = 2 * time.Second
	// HandBackTimeout is the deadline of a hand-back's Fail at stop.
	HandBackTimeout = time.Second
	// CallTimeout is the deadline of every call except Lease.
	CallTimeout = 10 * time.Second
	// LeaseMargin is added to the poll wait to make a Lease call's deadline.
	LeaseMargin = 5 * time.Second
	// BackoffBase and BackoffMax bound the pause after failed calls in a row.
	BackoffBase = 200 * time.Millisecond
	BackoffMax  = 10 * time.Second
)

// HeartbeatInterval is a third of the lease: two heartbeats may fail before a lease runs out.
func HeartbeatInterval(lease time.Duration) time.Duration { return lease / 3 }

// BackoffCeiling is the longest pause after failures failed calls in a row (0 = the first):
// min(BackoffMax, BackoffBase * 2^failures).
func BackoffCeiling(failures int) time.Duration {
	d := BackoffBase << min(max(failures, 0), 16)
	return min(d, BackoffMax)
}

// Backoff is a random pause in [0.1, 1] x BackoffCeiling(failures) (full jitter), so
// reconnecting workers spread out instead of retrying in step.
func Backoff(failures int) time.Duration {
	return time.Duration(float64(BackoffCeiling(failures)) * max(rand.Float64(), 0.1))
}

// StopsWorker reports whether a Lease error stops the worker instead of being retried:
// UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT, UNIMPLEMENTED.
func StopsWorker(err error) bool {
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied, codes.InvalidArgument, codes.Unimplemented:
		return true
	}
	return false
}
