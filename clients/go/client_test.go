package taskbroker_test

// The Client's operator calls against a live broker at $TASKBROKER_ADDR (skipped without one).

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

func TestClientReadsListsCancelsRequeuesAndExplainsTasksByStateName(t *testing.T) {
	addr := os.Getenv("TASKBROKER_ADDR")
	if addr == "" {
		t.Skip("TASKBROKER_ADDR is not set; needs a live broker")
	}
	c, err := taskbroker.Connect(addr, taskbroker.FromEnv())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	queue := "test.go.client." + time.Now().Format("150405.000000")
	res, err := taskbroker.SubmitJSON(ctx, c.Broker, queue, map[string]string{"to": "ada"}, taskbroker.WithDelay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	id := res.GetTaskId()

	got, err := c.GetTask(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != taskbroker.StateScheduled || got.Queue != queue || string(got.Payload) != `{"to":"ada"}` || got.RunAt.Before(time.Now().Add(50*time.Minute)) {
		t.Fatalf("got %+v, want SCHEDULED in %s about an hour from now", got, queue)
	}
	why, err := c.ExplainTask(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if why.State != taskbroker.StateScheduled || len(why.Gates) != 1 || why.Gates[0].Kind != "RUN_AT_IN_FUTURE" || why.Gates[0].Until.IsZero() {
		t.Fatalf("explanation %+v, want one RUN_AT_IN_FUTURE gate with its time", why)
	}

	var listed []string
	for task, err := range c.ListTasks(ctx, taskbroker.TaskFilter{Queue: queue, States: []taskbroker.TaskState{taskbroker.StateScheduled}}) {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, task.ID+" "+string(task.State))
	}
	if len(listed) != 1 || listed[0] != id+" SCHEDULED" {
		t.Fatalf("listed %v, want [%s SCHEDULED]", listed, id)
	}
	for _, err := range c.ListTasks(ctx, taskbroker.TaskFilter{States: []taskbroker.TaskState{"FINISHED"}}) {
		if err == nil || err.Error() != "taskbroker: unknown task state FINISHED" {
			t.Fatalf("a filter on an unknown state: %v", err)
		}
	}

	cancelled, err := c.CancelTask(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if cancelled.State != taskbroker.StateCancelled {
		t.Fatalf("after CancelTask: %s, want CANCELLED", cancelled.State)
	}
	requeued, err := c.RequeueTask(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if requeued.State != taskbroker.StateReady {
		t.Fatalf("after RequeueTask: %s, want READY", requeued.State)
	}
	why, err = c.ExplainTask(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(why.Gates) != 1 || why.Gates[0].Kind != "NONE" {
		t.Fatalf("explanation of a READY task %+v, want the single gate NONE", why)
	}

	// The same Client is the worker's connection.
	w, err := worker.New(c, worker.Config{Queues: []string{queue}, WorkerID: "test-go-client", PollWait: time.Second},
		func(_ context.Context, task *worker.Task) ([]byte, error) { return []byte("sent"), nil })
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	defer func() { stop(); <-ran }()
	if _, err := c.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	done, err := c.GetTask(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if done.State != taskbroker.StateSucceeded || string(done.Result) != "sent" || done.FinishedAt.IsZero() {
		t.Fatalf("after the worker: %s with %q", done.State, done.Result)
	}
	if _, err := c.RequeueTask(ctx, "no-such-task"); err == nil {
		t.Fatal("RequeueTask of an unknown id succeeded")
	}
}

func TestListTasksFiltersByTargetAndMetadata(t *testing.T) {
	addr := os.Getenv("TASKBROKER_ADDR")
	if addr == "" {
		t.Skip("TASKBROKER_ADDR is not set; needs a live broker")
	}
	c, err := taskbroker.Connect(addr, taskbroker.FromEnv())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	queue := "test.go.client.filters." + time.Now().Format("150405.000000")
	submit := func(opts ...taskbroker.SubmitOption) string {
		res, err := taskbroker.SubmitJSON(ctx, c.Broker, queue, "x", append(opts, taskbroker.WithDelay(time.Hour))...)
		if err != nil {
			t.Fatal(err)
		}
		return res.GetTaskId()
	}
	forA := submit(taskbroker.WithTarget(taskbroker.TargetWorker("w-a")))
	gpuEU := submit(taskbroker.WithTarget(taskbroker.TargetLabels(map[string]string{"gpu": "a100", "zone": "eu"})))
	gpu := submit(taskbroker.WithTarget(taskbroker.TargetLabels(map[string]string{"gpu": "a100"})))
	acme := submit(taskbroker.WithMetadata(map[string]string{"tenant.id": "acme"}))
	globex := submit(taskbroker.WithMetadata(map[string]string{"tenant.id": "globex", "tier": "gold"}))
	plain := submit()

	ids := func(f taskbroker.TaskFilter) []string {
		f.Queue = queue
		var got []string
		for task, err := range c.ListTasks(ctx, f) {
			if err != nil {
				t.Fatalf("ListTasks(%+v): %v", f, err)
			}
			got = append(got, task.ID)
		}
		slices.Sort(got)
		return got
	}
	sorted := func(ids ...string) []string { slices.Sort(ids); return ids }
	for _, tc := range []struct {
		filter taskbroker.TaskFilter
		want   []string
	}{
		{taskbroker.TaskFilter{}, sorted(forA, gpuEU, gpu, acme, globex, plain)},
		{taskbroker.TaskFilter{TargetWorker: "w-a"}, []string{forA}},
		{taskbroker.TaskFilter{TargetWorker: "w-b"}, nil},
		{taskbroker.TaskFilter{TargetLabels: map[string]string{"gpu": "a100"}}, sorted(gpuEU, gpu)},
		{taskbroker.TaskFilter{TargetLabels: map[string]string{"gpu": "a100", "zone": "eu"}}, []string{gpuEU}},
		{taskbroker.TaskFilter{MetadataKey: "tenant.id"}, sorted(acme, globex)},
		{taskbroker.TaskFilter{MetadataKey: "tenant.id", MetadataValue: "acme"}, []string{acme}},
		{taskbroker.TaskFilter{MetadataKey: "tier", TargetWorker: "w-a"}, nil},
	} {
		if got := ids(tc.filter); !slices.Equal(got, tc.want) {
			t.Errorf("ListTasks(%+v) = %v, want %v", tc.filter, got, tc.want)
		}
	}

	var refused error
	for _, err := range c.ListTasks(ctx, taskbroker.TaskFilter{Queue: queue, MetadataValue: "acme"}) {
		refused = err
	}
	if status.Code(refused) != codes.InvalidArgument {
		t.Fatalf("a metadata value without a key: %v, want INVALID_ARGUMENT", refused)
	}
}
