package taskbroker

// Submitting: the TaskSpec fields as SubmitJSON options, and the resend of a Submit the
// broker refused for backpressure (a queue's max_pending: RESOURCE_EXHAUSTED with
// google.rpc.RetryInfo).

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

const (
	// SubmitRetries is how many times a Submit refused with RESOURCE_EXHAUSTED and a RetryInfo
	// is sent again before its error is returned (5 tries in all; docs/client-spec.md, point 18).
	SubmitRetries = 4
	// SubmitRetryMaxDelay caps the wait before each such resend (a longer hint is cut to it).
	SubmitRetryMaxDelay = 10 * time.Second
)

// RetryDelay returns the delay of the google.rpc.RetryInfo detail of err; ok is false when
// err carries none.
func RetryDelay(err error) (delay time.Duration, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus {
		return 0, false
	}
	for _, d := range st.Details() {
		if info, isInfo := d.(*errdetails.RetryInfo); isInfo {
			return info.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// SubmitRetryDelay says how long to wait before sending a refused Submit again, after
// retries resends: only RESOURCE_EXHAUSTED with a RetryInfo is resent (the broker stored
// nothing), at most SubmitRetries times, each wait at most SubmitRetryMaxDelay. ok is false
// when the error is to be returned.
func SubmitRetryDelay(err error, retries int) (delay time.Duration, ok bool) {
	if retries >= SubmitRetries || status.Code(err) != codes.ResourceExhausted {
		return 0, false
	}
	delay, ok = RetryDelay(err)
	if !ok {
		return 0, false
	}
	return min(max(delay, 0), SubmitRetryMaxDelay), true
}

// Submit sends specs in one SubmitRequest (atomically) and returns their results in order
// (SubmitResult: task id, Deduplicated, Replaced, CopyTaskIds). A refusal for backpressure
// (RESOURCE_EXHAUSTED with RetryInfo) is sent again after the hinted delay, as
// SubmitRetryDelay says; ctx ending cuts the wait short.
func Submit(ctx context.Context, broker pb.BrokerServiceClient, specs ...*pb.TaskSpec) (results []*pb.SubmitResult, err error) {
	// One send span around the resends (the connection's interceptor then makes none).
	ctx, send := startSend(ctx, specs)
	defer func() { send.end(results, err) }()
	req := &pb.SubmitRequest{Tasks: specs}
	for retries := 0; ; retries++ {
		resp, err := broker.Submit(ctx, req)
		if err == nil {
			if len(resp.GetResults()) != len(specs) {
				return nil, fmt.Errorf("taskbroker: Submit answered %d results for %d tasks", len(resp.GetResults()), len(specs))
			}
			return resp.GetResults(), nil
		}
		delay, retry := SubmitRetryDelay(err, retries)
		if !retry {
			return nil, err
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, err
		case <-timer.C:
		}
	}
}

// WithKey sets the task's key (idempotency: unique per queue while the task exists).
func WithKey(key string) SubmitOption { return edit(func(s *pb.TaskSpec) { s.Key = key }) }

// WithPriority sets the priority (higher leases first).
func WithPriority(p int32) SubmitOption { return edit(func(s *pb.TaskSpec) { s.Priority = p }) }

// WithRunAt keeps the task SCHEDULED until t.
func WithRunAt(t time.Time) SubmitOption {
	return edit(func(s *pb.TaskSpec) { s.RunAt = timestamppb.New(t) })
}

// WithDelay keeps the task SCHEDULED for d: its run_at is this machine's clock (time.Now,
// read when SubmitJSON builds the TaskSpec) plus d. The broker compares run_at with its own
// clock, so a skew between the two shifts the delay by as much. The later of WithRunAt and
// WithDelay in the options wins; d <= 0 makes the task ready at once.
func WithDelay(d time.Duration) SubmitOption {
	return edit(func(s *pb.TaskSpec) { s.RunAt = timestamppb.New(time.Now().Add(d)) })
}

// WithDeadline makes the task DEAD (DEADLINE_EXCEEDED) unless it finishes by t.
func WithDeadline(t time.Time) SubmitOption {
	return edit(func(s *pb.TaskSpec) { s.Deadline = timestamppb.New(t) })
}

// WithRetry sets the retry policy.
func WithRetry(r *pb.RetryPolicy) SubmitOption { return edit(func(s *pb.TaskSpec) { s.Retry = r }) }

// WithMetadata adds these pairs to the task's metadata.
func WithMetadata(m map[string]string) SubmitOption {
	return edit(func(s *pb.TaskSpec) {
		if s.Metadata == nil {
			s.Metadata = map[string]string{}
		}
		for k, v := range m {
			s.Metadata[k] = v
		}
	})
}

// WithTarget routes the task (TargetWorker, TargetLabels).
func WithTarget(t *pb.Target) SubmitOption { return edit(func(s *pb.TaskSpec) { s.Target = t }) }

// WithSticky reserves a retry for the worker that ran the failed attempt (SoftSticky, HardSticky).
func WithSticky(p *pb.StickyPolicy) SubmitOption { return edit(func(s *pb.TaskSpec) { s.Sticky = p }) }

// WithFanout submits copies sharing a fan-out group (Fanout); CopyTaskIds lists them.
func WithFanout(f *pb.Fanout) SubmitOption { return edit(func(s *pb.TaskSpec) { s.Fanout = f }) }

// WithConcurrencyKey sets the admission key (max_concurrent_per_key, per-key rate, fairness).
func WithConcurrencyKey(key string) SubmitOption {
	return edit(func(s *pb.TaskSpec) { s.ConcurrencyKey = key })
}

// WithBucket names the limit bucket the task counts against, in any queue
// ([A-Za-z0-9._:-]{1,128}); without it, its queue's bucket, if any.
func WithBucket(bucket string) SubmitOption { return edit(func(s *pb.TaskSpec) { s.Bucket = bucket }) }

// WithCheckpoint sets the checkpoint the first attempt starts from
// (Task.Checkpoint), as if an earlier attempt had saved it; the worker's own
// checkpoints replace it. Empty (or nil) is a checkpoint all the same.
func WithCheckpoint(checkpoint []byte) SubmitOption {
	return edit(func(s *pb.TaskSpec) {
		// A non-nil slice: the field is set (presence), even when empty.
		s.Checkpoint = append([]byte{}, checkpoint...)
	})
}

// WithDependsOn keeps the task BLOCKED until these tasks (ids) have SUCCEEDED.
func WithDependsOn(taskIDs ...string) SubmitOption {
	return edit(func(s *pb.TaskSpec) { s.DependsOn = append(s.DependsOn, taskIDs...) })
}

// WithDependsOnKeys is WithDependsOn naming tasks by queue and key (TaskKey), which may be
// submitted later.
func WithDependsOnKeys(keys ...*pb.TaskKey) SubmitOption {
	return edit(func(s *pb.TaskSpec) { s.DependsOnKeys = append(s.DependsOnKeys, keys...) })
}

// TaskKeyOf names a task by its queue and key, for WithDependsOnKeys.
func TaskKeyOf(queue, key string) *pb.TaskKey { return &pb.TaskKey{Queue: queue, Key: key} }

// WithRunIfDependencyFails runs the task even when a dependency ends DEAD or CANCELLED.
func WithRunIfDependencyFails() SubmitOption {
	return edit(func(s *pb.TaskSpec) { s.RunIfDependencyFails = true })
}

// WithOnDuplicateKey says what a submission whose key is taken does:
// DUPLICATE_KEY_POLICY_REPLACE_WAITING replaces a still-waiting task's payload, run_at,
// priority and metadata (SubmitResult.Replaced).
func WithOnDuplicateKey(p pb.DuplicateKeyPolicy) SubmitOption {
	return edit(func(s *pb.TaskSpec) { s.OnDuplicateKey = p })
}

// WithAtMostOnce gives the task one attempt: a lost lease or a failure makes it DEAD.
func WithAtMostOnce() SubmitOption { return edit(func(s *pb.TaskSpec) { s.AtMostOnce = true }) }

func edit(f func(*pb.TaskSpec)) SubmitOption {
	return func(o *submitOptions) { o.edits = append(o.edits, f) }
}
