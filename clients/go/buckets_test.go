package taskbroker_test

// Limit buckets and cooldowns against a live broker at $TASKBROKER_ADDR (skipped without one):
// the worker's FailRequest.cooldown, ListCooldowns and LiftCooldown, and a bucket's settings
// from definition to deletion.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

func liveClient(t *testing.T) (*taskbroker.Client, context.Context) {
	t.Helper()
	addr := os.Getenv("TASKBROKER_ADDR")
	if addr == "" {
		t.Skip("TASKBROKER_ADDR is not set; needs a live broker")
	}
	c, err := taskbroker.Connect(addr, taskbroker.FromEnv())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c, ctx
}

func unique(prefix string) string { return fmt.Sprintf("%s.%08x", prefix, rand.Uint32()) }

// runWorker runs a worker on queue until the returned stop is called; stop returns once Run
// has, so every attempt it started has been reported by then.
func runWorker(t *testing.T, c *taskbroker.Client, queue string, h worker.Handler) (stop func()) {
	t.Helper()
	w, err := worker.New(c, worker.Config{Queues: []string{queue}, PollWait: time.Second}, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func TestAHandlerCoolsItsKeyDownAndLiftingItLetsTheNextTaskRun(t *testing.T) {
	c, ctx := liveClient(t)
	queue, bucket := unique("test.go.cooldown"), unique("test.go.b")
	first, err := taskbroker.SubmitJSON(ctx, c.Broker, queue, "1", taskbroker.WithConcurrencyKey("acme"), taskbroker.WithBucket(bucket))
	if err != nil {
		t.Fatal(err)
	}
	failed := make(chan struct{})
	var ranMu sync.Mutex
	var ran []string
	h := func(_ context.Context, task *worker.Task) ([]byte, error) {
		if task.GetTaskId() == first.GetTaskId() {
			close(failed)
			return nil, worker.CoolDownKey(errors.New("429 Too Many Requests"), 10*time.Minute)
		}
		ranMu.Lock()
		ran = append(ran, task.GetTaskId())
		ranMu.Unlock()
		return []byte("ran"), nil
	}
	stop := runWorker(t, c, queue, h)
	select {
	case <-failed:
	case <-ctx.Done():
		t.Fatal("the first task was not leased")
	}
	stop() // returns once the attempt's Fail is answered: the cooldown is stored

	cooldowns, err := c.ListCooldowns(ctx, queue, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(cooldowns) != 1 || cooldowns[0].Scope != "CONCURRENCY_KEY" || cooldowns[0].Queue != queue ||
		cooldowns[0].ConcurrencyKey != "acme" || cooldowns[0].Bucket != "" || cooldowns[0].TaskID != first.GetTaskId() {
		t.Fatalf("cooldowns %+v, want acme's in %s set by %s", cooldowns, queue, first.GetTaskId())
	}
	until := cooldowns[0].Until
	if until.Before(time.Now().Add(5 * time.Minute)) {
		t.Fatalf("the cooldown ends at %v, want about 10 minutes from now", until)
	}
	retry, err := c.GetTask(ctx, first.GetTaskId())
	if err != nil {
		t.Fatal(err)
	}
	if retry.Attempt != 1 || retry.Bucket != bucket || retry.RunAt.Before(until) {
		t.Fatalf("the failed task %+v: want attempt 1 in bucket %s, its retry not before %v", retry, bucket, until)
	}

	second, err := taskbroker.SubmitJSON(ctx, c.Broker, queue, "2", taskbroker.WithConcurrencyKey("acme"), taskbroker.WithBucket(bucket))
	if err != nil {
		t.Fatal(err)
	}
	why, err := c.ExplainTask(ctx, second.GetTaskId())
	if err != nil {
		t.Fatal(err)
	}
	if len(why.Gates) != 1 || why.Gates[0].Kind != "COOLDOWN" || !why.Gates[0].Until.Equal(until) {
		t.Fatalf("the second task's gates %+v, want one COOLDOWN until %v", why.Gates, until)
	}

	if lifted, err := c.LiftCooldown(ctx, taskbroker.KeyCooldown(queue, "acme")); err != nil || !lifted {
		t.Fatalf("LiftCooldown = %v, %v; want true", lifted, err)
	}
	if left, err := c.ListCooldowns(ctx, queue, ""); err != nil || len(left) != 0 {
		t.Fatalf("after the lift: %+v, %v", left, err)
	}
	if lifted, err := c.LiftCooldown(ctx, taskbroker.KeyCooldown(queue, "acme")); err != nil || lifted {
		t.Fatalf("a second LiftCooldown = %v, %v; want false", lifted, err)
	}
	runWorker(t, c, queue, h)
	done, err := c.Wait(ctx, second.GetTaskId())
	if err != nil {
		t.Fatal(err)
	}
	ranMu.Lock()
	defer ranMu.Unlock()
	if string(done.GetResult()) != "ran" || !slices.Equal(ran, []string{second.GetTaskId()}) {
		t.Fatalf("result %q, handlers ran %v; want the second task alone", done.GetResult(), ran)
	}
}

func TestAHandlerCoolsItsBucketDown(t *testing.T) {
	c, ctx := liveClient(t)
	queue, bucket := unique("test.go.cooldown"), unique("test.go.b")
	res, err := taskbroker.SubmitJSON(ctx, c.Broker, queue, "x", taskbroker.WithBucket(bucket))
	if err != nil {
		t.Fatal(err)
	}
	failed := make(chan struct{})
	var once sync.Once
	stop := runWorker(t, c, queue, func(context.Context, *worker.Task) ([]byte, error) {
		once.Do(func() { close(failed) })
		return nil, worker.CoolDownBucket(errors.New("quota exhausted"), 10*time.Minute)
	})
	select {
	case <-failed:
	case <-ctx.Done():
		t.Fatal("the task was not leased")
	}
	stop()
	held, err := c.ListCooldowns(ctx, "", bucket)
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || held[0].Scope != "BUCKET" || held[0].Bucket != bucket || held[0].TaskID != res.GetTaskId() {
		t.Fatalf("cooldowns %+v, want bucket %s's", held, bucket)
	}
	if lifted, err := c.LiftCooldown(ctx, taskbroker.BucketCooldown(bucket)); err != nil || !lifted {
		t.Fatalf("LiftCooldown = %v, %v; want true", lifted, err)
	}
}

func TestABucketFromDefinitionToDeletion(t *testing.T) {
	c, ctx := liveClient(t)
	name := unique("test.go.partner-api")
	b, err := c.UpdateBucket(ctx, name, taskbroker.BucketRateLimit(20, 40), taskbroker.BucketMaxConcurrent(5))
	if err != nil {
		t.Fatal(err)
	}
	if b.Name != name || b.RateLimit != 20 || b.Burst != 40 || b.MaxConcurrent != 5 || b.LeasesHeld != 0 ||
		b.UpdatedAt.IsZero() || !b.CooldownUntil.IsZero() {
		t.Fatalf("defined %+v", b)
	}
	got, err := c.GetBucket(ctx, name)
	if err != nil || got.Name != name || got.RateLimit != 20 || got.MaxConcurrent != 5 {
		t.Fatalf("GetBucket = %+v, %v", got, err)
	}
	all, err := c.ListBuckets(ctx)
	if err != nil || !slices.ContainsFunc(all, func(x *taskbroker.Bucket) bool { return x.Name == name }) {
		t.Fatalf("ListBuckets = %v, %v; want %s among them", all, err, name)
	}

	// Only what is given changes.
	if b, err = c.UpdateBucket(ctx, name, taskbroker.BucketMaxConcurrent(0)); err != nil || b.RateLimit != 20 || b.Burst != 40 || b.MaxConcurrent != 0 {
		t.Fatalf("after BucketMaxConcurrent(0): %+v, %v", b, err)
	}
	if b, err = c.UpdateBucket(ctx, name, taskbroker.BucketRateLimit(0, 0)); err != nil || b.RateLimit != 0 || b.Proto.GetConfig().GetRateLimit() != nil {
		t.Fatalf("after BucketRateLimit(0, 0): %+v, %v", b, err)
	}

	if err := c.DeleteBucket(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetBucket(ctx, name); status.Code(err) != codes.NotFound {
		t.Fatalf("GetBucket of a deleted bucket: %v, want NOT_FOUND", err)
	}
	if err := c.DeleteBucket(ctx, name); status.Code(err) != codes.NotFound {
		t.Fatalf("DeleteBucket of an unknown bucket: %v, want NOT_FOUND", err)
	}
	if _, err := c.UpdateBucket(ctx, "no spaces allowed", taskbroker.BucketMaxConcurrent(1)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a bad bucket name: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := c.UpdateBucket(ctx, name, taskbroker.BucketRateLimit(-1, 0)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a negative rate: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := c.LiftCooldown(ctx, taskbroker.KeyCooldown(name, "")); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a key cooldown without a key: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := c.UpdateBucket(ctx, name); err == nil {
		t.Fatal("UpdateBucket with nothing to change was sent")
	}
}

func TestUpdateBucketNamesEachSettingOnceInItsMask(t *testing.T) {
	req, err := taskbroker.UpdateBucketRequest("b", taskbroker.BucketMaxConcurrent(3), taskbroker.BucketMaxConcurrent(4),
		taskbroker.BucketRateLimit(20, 40))
	if err != nil {
		t.Fatal(err)
	}
	if paths := req.GetUpdateMask().GetPaths(); !slices.Equal(paths, []string{"max_concurrent", "rate_limit"}) {
		t.Fatalf("mask %v", paths)
	}
	if c := req.GetConfig(); c.GetMaxConcurrent() != 4 || c.GetRateLimit().GetPerSecond() != 20 || c.GetRateLimit().GetBurst() != 40 {
		t.Fatalf("config %v", c)
	}
	if req, _ := taskbroker.UpdateBucketRequest("b", taskbroker.BucketRateLimit(0, 9)); req.GetConfig().GetRateLimit() != nil {
		t.Fatalf("BucketRateLimit(0, _) sent a rate limit: %v", req.GetConfig())
	}
}
