package taskbroker_test

import (
	"context"
	"os"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func statusWith(t *testing.T, code codes.Code, delay *time.Duration) error {
	t.Helper()
	st := status.New(code, "queue q has 1 pending tasks, its max_pending")
	if delay != nil {
		var err error
		st, err = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(*delay)})
		if err != nil {
			t.Fatal(err)
		}
	}
	return st.Err()
}

func TestSubmitRetryDelayFollowsRetryInfoWithinItsBounds(t *testing.T) {
	second, long := time.Second, time.Minute
	cases := []struct {
		name    string
		err     error
		retries int
		want    time.Duration
		ok      bool
	}{
		{"hinted", statusWith(t, codes.ResourceExhausted, &second), 0, time.Second, true},
		{"capped", statusWith(t, codes.ResourceExhausted, &long), 2, taskbroker.SubmitRetryMaxDelay, true},
		{"retries spent", statusWith(t, codes.ResourceExhausted, &second), taskbroker.SubmitRetries, 0, false},
		{"no RetryInfo", statusWith(t, codes.ResourceExhausted, nil), 0, 0, false},
		{"other code", statusWith(t, codes.Unavailable, &second), 0, 0, false},
	}
	for _, c := range cases {
		got, ok := taskbroker.SubmitRetryDelay(c.err, c.retries)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: SubmitRetryDelay = %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// recorder answers Submit with one result per task and keeps the request: what the options
// put on the wire, whatever this broker serves yet.
type recorder struct {
	pb.BrokerServiceClient
	got *pb.SubmitRequest
}

func (r *recorder) Submit(_ context.Context, req *pb.SubmitRequest, _ ...grpc.CallOption) (*pb.SubmitResponse, error) {
	r.got = req
	return &pb.SubmitResponse{Results: []*pb.SubmitResult{{TaskId: "t", Deduplicated: true, Replaced: true}}}, nil
}

func TestSubmitOptionsSetEveryField(t *testing.T) {
	rec := &recorder{}
	runAt := time.Now().Add(time.Hour)
	res, err := taskbroker.SubmitJSON(context.Background(), rec, "q", "v",
		taskbroker.WithTask(&pb.TaskSpec{Key: "from-template", Priority: 1}),
		taskbroker.WithKey("k"), taskbroker.WithPriority(7), taskbroker.WithRunAt(runAt),
		taskbroker.WithMetadata(map[string]string{"m": "1"}), taskbroker.WithConcurrencyKey("tenant-1"),
		taskbroker.WithDependsOn("a"), taskbroker.WithDependsOnKeys(taskbroker.TaskKeyOf("q2", "k2")),
		taskbroker.WithRunIfDependencyFails(), taskbroker.WithAtMostOnce(),
		taskbroker.WithOnDuplicateKey(pb.DuplicateKeyPolicy_DUPLICATE_KEY_POLICY_REPLACE_WAITING),
		taskbroker.WithTarget(taskbroker.TargetWorker("w")), taskbroker.WithFanout(taskbroker.Fanout(2, true)))
	if err != nil {
		t.Fatal(err)
	}
	if !res.GetReplaced() {
		t.Errorf("the result %+v lost replaced", res)
	}
	s := rec.got.GetTasks()[0]
	if s.GetQueue() != "q" || string(s.GetPayload()) != `"v"` || s.GetKey() != "k" || s.GetPriority() != 7 ||
		!s.GetRunAt().AsTime().Equal(runAt.Truncate(time.Nanosecond)) || s.GetMetadata()["m"] != "1" ||
		s.GetConcurrencyKey() != "tenant-1" || len(s.GetDependsOn()) != 1 ||
		len(s.GetDependsOnKeys()) != 1 || s.GetDependsOnKeys()[0].GetKey() != "k2" || !s.GetRunIfDependencyFails() ||
		!s.GetAtMostOnce() || s.GetOnDuplicateKey() != pb.DuplicateKeyPolicy_DUPLICATE_KEY_POLICY_REPLACE_WAITING ||
		s.GetTarget().GetWorkerId() != "w" || s.GetFanout().GetCopies() != 2 {
		t.Errorf("sent %v; want every option applied over the template", s)
	}
}

func TestWithCheckpointSetsTheFieldEvenWhenEmpty(t *testing.T) {
	rec := &recorder{}
	ctx := context.Background()
	if _, err := taskbroker.SubmitJSON(ctx, rec, "q", "v", taskbroker.WithCheckpoint([]byte("step=3\xff"))); err != nil {
		t.Fatal(err)
	}
	if got := rec.got.GetTasks()[0]; string(got.GetCheckpoint()) != "step=3\xff" {
		t.Errorf("sent checkpoint %q; want step=3\\xff", got.GetCheckpoint())
	}
	if _, err := taskbroker.SubmitJSON(ctx, rec, "q", "v", taskbroker.WithCheckpoint(nil)); err != nil {
		t.Fatal(err)
	}
	if got := rec.got.GetTasks()[0]; got.Checkpoint == nil {
		t.Error("an empty checkpoint was sent as none")
	}
	if _, err := taskbroker.SubmitJSON(ctx, rec, "q", "v"); err != nil {
		t.Fatal(err)
	}
	if got := rec.got.GetTasks()[0]; got.Checkpoint != nil {
		t.Errorf("sent checkpoint %q without WithCheckpoint", got.Checkpoint)
	}
}

func TestWithDelaySetsRunAtToNowPlusTheDelay(t *testing.T) {
	rec := &recorder{}
	delay := 90 * time.Minute
	before := time.Now()
	if _, err := taskbroker.SubmitJSON(context.Background(), rec, "q", "v", taskbroker.WithDelay(delay)); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	runAt := rec.got.GetTasks()[0].GetRunAt().AsTime()
	if runAt.Before(before.Add(delay).Round(0)) || runAt.After(after.Add(delay).Round(0)) {
		t.Errorf("run_at %v; want within [%v, %v] (the clock before and after the call, plus %v)",
			runAt, before.Add(delay), after.Add(delay), delay)
	}
}

func TestSubmitOptionsReachTheBroker(t *testing.T) {
	addr := os.Getenv("TASKBROKER_ADDR")
	if addr == "" {
		t.Skip("TASKBROKER_ADDR is not set; this test needs a live broker")
	}
	conn, err := taskbroker.NewClient(addr, taskbroker.FromEnv())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	broker, admin := pb.NewBrokerServiceClient(conn), pb.NewAdminServiceClient(conn)
	ctx := context.Background()
	queue := "test.go.submit." + time.Now().Format("150405.000000")
	first, err := taskbroker.SubmitJSON(ctx, broker, queue, "v1", taskbroker.WithKey("k"), taskbroker.WithPriority(7),
		taskbroker.WithConcurrencyKey("tenant-1"), taskbroker.WithAtMostOnce())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := admin.GetTask(ctx, &pb.GetTaskRequest{TaskId: first.GetTaskId()})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetTask(); got.GetKey() != "k" || got.GetPriority() != 7 || got.GetConcurrencyKey() != "tenant-1" || !got.GetAtMostOnce() {
		t.Errorf("stored key %q priority %d concurrency key %q at_most_once %v", got.GetKey(), got.GetPriority(), got.GetConcurrencyKey(), got.GetAtMostOnce())
	}
}
