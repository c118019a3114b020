package taskbroker

// Limit buckets and cooldowns on Client: a bucket's settings (get, list, update by field
// mask, delete) and use, and the live cooldowns workers set (list, lift). A worker sets a
// cooldown by failing with worker.CoolDownKey or worker.CoolDownBucket; see
// docs/semantics.md, "Limit buckets and cooldowns".

import (
	"context"
	"errors"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/fieldmaskpb"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// Bucket is a limit bucket as the broker has it: its settings, its use now and its
// cooldown. Proto is the message as it came.
type Bucket struct {
	Name string
	// RateLimit is the leases per second granted to its tasks together, 0 for no rate limit;
	// Burst is its burst (0: one second's worth).
	RateLimit float64
	Burst     uint32
	// MaxConcurrent is the leases its tasks hold at once, 0 for no limit.
	MaxConcurrent uint32
	// Tokens in the rate limit's bucket now, and the leases its tasks hold now.
	Tokens     float64
	LeasesHeld uint32
	UpdatedAt  time.Time
	// CooldownUntil is when a cooldown of the bucket ends; zero when it has none.
	CooldownUntil time.Time
	Proto         *pb.LimitBucket
}

// BucketOf converts a LimitBucket message into a Bucket.
func BucketOf(b *pb.LimitBucket) *Bucket {
	if b == nil {
		return nil
	}
	rate := b.GetConfig().GetRateLimit()
	return &Bucket{
		Name: b.GetName(), RateLimit: rate.GetPerSecond(), Burst: rate.GetBurst(),
		MaxConcurrent: b.GetConfig().GetMaxConcurrent(), Tokens: b.GetUse().GetTokens(),
		LeasesHeld: b.GetUse().GetLeasesHeld(), UpdatedAt: timeOf(b.GetUpdateTime()),
		CooldownUntil: timeOf(b.GetCooldownUntil()), Proto: b,
	}
}

// Cooldown is one live cooldown: Scope "CONCURRENCY_KEY" (Queue and ConcurrencyKey set) or
// "BUCKET" (Bucket set), held until Until, set by the failed attempt of TaskID.
type Cooldown struct {
	Scope          string
	Queue          string
	ConcurrencyKey string
	Bucket         string
	Until          time.Time
	TaskID         string
	Proto          *pb.CooldownHold
}

func cooldownOf(c *pb.CooldownHold) Cooldown {
	scope := ""
	if c.GetScope() != pb.CooldownScope_COOLDOWN_SCOPE_UNSPECIFIED {
		scope = strings.TrimPrefix(c.GetScope().String(), "COOLDOWN_SCOPE_")
	}
	return Cooldown{
		Scope: scope, Queue: c.GetQueue(), ConcurrencyKey: c.GetConcurrencyKey(), Bucket: c.GetBucket(),
		Until: timeOf(c.GetUntil()), TaskID: c.GetTaskId(), Proto: c,
	}
}

// BucketChange is one setting UpdateBucket changes; the others stay as they are.
type BucketChange func(*pb.UpdateBucketRequest)

// BucketRateLimit sets the bucket's rate: perSecond leases a second to its tasks together,
// with burst (0: one second's worth); perSecond 0 removes the rate limit.
func BucketRateLimit(perSecond float64, burst uint32) BucketChange {
	return func(r *pb.UpdateBucketRequest) {
		r.Config.RateLimit = nil
		if perSecond != 0 {
			r.Config.RateLimit = &pb.RateLimit{PerSecond: perSecond, Burst: burst}
		}
		addPath(r, "rate_limit")
	}
}

// BucketMaxConcurrent sets the leases the bucket's tasks hold at once; 0 removes the limit.
func BucketMaxConcurrent(n uint32) BucketChange {
	return func(r *pb.UpdateBucketRequest) {
		r.Config.MaxConcurrent = n
		addPath(r, "max_concurrent")
	}
}

func addPath(r *pb.UpdateBucketRequest, path string) {
	for _, p := range r.UpdateMask.Paths {
		if p == path {
			return
		}
	}
	r.UpdateMask.Paths = append(r.UpdateMask.Paths, path)
}

// UpdateBucketRequest is the request UpdateBucket sends: the changes, named in its mask.
func UpdateBucketRequest(name string, changes ...BucketChange) (*pb.UpdateBucketRequest, error) {
	if len(changes) == 0 {
		return nil, errors.New("taskbroker: UpdateBucket needs BucketRateLimit or BucketMaxConcurrent")
	}
	r := &pb.UpdateBucketRequest{Name: name, Config: &pb.BucketConfig{}, UpdateMask: &fieldmaskpb.FieldMask{}}
	for _, change := range changes {
		change(r)
	}
	return r, nil
}

// CooldownOf names what LiftCooldown ends: a queue's concurrency key (KeyCooldown) or a
// bucket (BucketCooldown).
type CooldownOf struct{ queue, key, bucket string }

// KeyCooldown names the cooldown of key in queue.
func KeyCooldown(queue, key string) CooldownOf { return CooldownOf{queue: queue, key: key} }

// BucketCooldown names the cooldown of a bucket.
func BucketCooldown(bucket string) CooldownOf { return CooldownOf{bucket: bucket} }

// GetBucket reads one bucket's settings, use and cooldown; NOT_FOUND when it is not defined.
func (c *Client) GetBucket(ctx context.Context, name string) (*Bucket, error) {
	r, err := c.Admin.GetBucket(ctx, &pb.GetBucketRequest{Name: name})
	if err != nil {
		return nil, err
	}
	return BucketOf(r.GetBucket()), nil
}

// ListBuckets reads every defined bucket, by name.
func (c *Client) ListBuckets(ctx context.Context) ([]*Bucket, error) {
	r, err := c.Admin.ListBuckets(ctx, &pb.ListBucketsRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]*Bucket, 0, len(r.GetBuckets()))
	for _, b := range r.GetBuckets() {
		out = append(out, BucketOf(b))
	}
	return out, nil
}

// UpdateBucket changes the settings given, defining the bucket if need be, and returns it.
//
//	c.UpdateBucket(ctx, "partner-api", taskbroker.BucketRateLimit(20, 20), taskbroker.BucketMaxConcurrent(50))
func (c *Client) UpdateBucket(ctx context.Context, name string, changes ...BucketChange) (*Bucket, error) {
	req, err := UpdateBucketRequest(name, changes...)
	if err != nil {
		return nil, err
	}
	r, err := c.Admin.UpdateBucket(ctx, req)
	if err != nil {
		return nil, err
	}
	return BucketOf(r.GetBucket()), nil
}

// DeleteBucket removes a bucket (its tasks lease without its limits); NOT_FOUND when it is
// not defined.
func (c *Client) DeleteBucket(ctx context.Context, name string) error {
	_, err := c.Admin.DeleteBucket(ctx, &pb.DeleteBucketRequest{Name: name})
	return err
}

// ListCooldowns reads the live cooldowns, soonest end first: only queue's keys, or only
// bucket's, when one is given.
func (c *Client) ListCooldowns(ctx context.Context, queue, bucket string) ([]Cooldown, error) {
	r, err := c.Admin.ListCooldowns(ctx, &pb.ListCooldownsRequest{Queue: queue, Bucket: bucket})
	if err != nil {
		return nil, err
	}
	out := make([]Cooldown, 0, len(r.GetCooldowns()))
	for _, h := range r.GetCooldowns() {
		out = append(out, cooldownOf(h))
	}
	return out, nil
}

// LiftCooldown ends a cooldown now; false when there was none.
//
//	lifted, err := c.LiftCooldown(ctx, taskbroker.KeyCooldown("calls", "acme"))
func (c *Client) LiftCooldown(ctx context.Context, of CooldownOf) (bool, error) {
	r, err := c.Admin.LiftCooldown(ctx, &pb.LiftCooldownRequest{Queue: of.queue, ConcurrencyKey: of.key, Bucket: of.bucket})
	if err != nil {
		return false, err
	}
	return r.GetLifted(), nil
}
