package taskbroker_test

import (
	"context"
	"os"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
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

func TestSubmitOptionsSetEveryField(t *testing.T) {
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
	first, err := taskbroker.SubmitJSON(ctx, broker, queue, "v1", taskbroker.WithKey("k"),
		taskbroker.WithRunAt(time.Now().Add(time.Hour)), taskbroker.WithConcurrencyKey("tenant-1"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := taskbroker.SubmitJSON(ctx, broker, queue, "v2", taskbroker.WithKey("k"), taskbroker.WithPriority(7),
		taskbroker.WithRunAt(time.Now().Add(time.Hour)),
		taskbroker.WithOnDuplicateKey(pb.DuplicateKeyPolicy_DUPLICATE_KEY_POLICY_REPLACE_WAITING))
	if err != nil {
		t.Fatal(err)
	}
	if again.GetTaskId() != first.GetTaskId() || !again.GetReplaced() || !again.GetDeduplicated() {
		t.Fatalf("the second submit answered %+v; want task %s deduplicated and replaced", again, first.GetTaskId())
	}
	resp, err := admin.GetTask(ctx, &pb.GetTaskRequest{TaskId: first.GetTaskId()})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetTask(); string(got.GetPayload()) != `"v2"` || got.GetPriority() != 7 {
		t.Errorf("the replaced task has payload %q priority %d; want \"v2\" and 7", got.GetPayload(), got.GetPriority())
	}
	dep, err := taskbroker.SubmitJSON(ctx, broker, queue, "after", taskbroker.WithDependsOnKeys(taskbroker.TaskKeyOf(queue, "k")),
		taskbroker.WithAtMostOnce())
	if err != nil {
		t.Fatal(err)
	}
	resp, err = admin.GetTask(ctx, &pb.GetTaskRequest{TaskId: dep.GetTaskId()})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetTask(); got.GetState() != pb.TaskState_TASK_STATE_BLOCKED || !got.GetAtMostOnce() {
		t.Errorf("the task depending on key k is %v, at_most_once %v; want BLOCKED and true", got.GetState(), got.GetAtMostOnce())
	}
}
