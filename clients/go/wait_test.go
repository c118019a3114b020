package taskbroker_test

// Wait against an in-process fake AdminService that drops a stream, so the reconnect with
// after_event_id is seen; dependencies and SubmitAndWait against a live broker at
// $TASKBROKER_ADDR (skipped without one).

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

type watchScript func(f *fakeAdmin, req *pb.WatchTasksRequest, stream grpc.ServerStreamingServer[pb.WatchTasksResponse]) error

type fakeAdmin struct {
	pb.UnimplementedAdminServiceServer
	mu       sync.Mutex
	states   map[string]pb.TaskState
	requests []*pb.WatchTasksRequest
	scripts  []watchScript
}

func (f *fakeAdmin) set(id string, s pb.TaskState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.states[id] = s
}

func (f *fakeAdmin) GetTask(_ context.Context, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.states[req.GetTaskId()]
	if !ok {
		return nil, status.Error(codes.NotFound, "task_id: no such task")
	}
	task := &pb.Task{Id: req.GetTaskId(), State: s, Result: []byte("r-" + req.GetTaskId())}
	if s == pb.TaskState_TASK_STATE_DEAD || s == pb.TaskState_TASK_STATE_CANCELLED {
		task.Result, task.LastError = nil, "boom-"+req.GetTaskId()
	}
	return &pb.GetTaskResponse{Task: task}, nil
}

func (f *fakeAdmin) WatchTasks(req *pb.WatchTasksRequest, stream grpc.ServerStreamingServer[pb.WatchTasksResponse]) error {
	f.mu.Lock()
	f.requests = append(f.requests, req)
	var script watchScript = hold
	if len(f.scripts) > 0 {
		script, f.scripts = f.scripts[0], f.scripts[1:]
	}
	f.mu.Unlock()
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	return script(f, req, stream)
}

// hold sends nothing until the client goes away.
func hold(_ *fakeAdmin, _ *pb.WatchTasksRequest, stream grpc.ServerStreamingServer[pb.WatchTasksResponse]) error {
	<-stream.Context().Done()
	return nil
}

func succeeded(eventID uint64, id string) *pb.WatchTasksResponse {
	return &pb.WatchTasksResponse{Events: []*pb.TaskEvent{{
		EventId: eventID, TaskId: id, Kind: pb.TaskEventKind_TASK_EVENT_KIND_SUCCEEDED, State: pb.TaskState_TASK_STATE_SUCCEEDED,
	}}}
}

func startFake(t *testing.T) (*fakeAdmin, pb.AdminServiceClient) {
	t.Helper()
	f := &fakeAdmin{states: map[string]pb.TaskState{
		"t1":   pb.TaskState_TASK_STATE_LEASED,
		"t2":   pb.TaskState_TASK_STATE_READY,
		"done": pb.TaskState_TASK_STATE_SUCCEEDED,
		"dead": pb.TaskState_TASK_STATE_DEAD,
		"gone": pb.TaskState_TASK_STATE_CANCELLED,
	}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterAdminServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return f, pb.NewAdminServiceClient(conn)
}

func TestWaitReturnsAFinishedTaskAtOnce(t *testing.T) {
	f, admin := startFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	task, err := taskbroker.Wait(ctx, admin, "done")
	if err != nil {
		t.Fatal(err)
	}
	if task.GetState() != pb.TaskState_TASK_STATE_SUCCEEDED || string(task.GetResult()) != "r-done" {
		t.Fatalf("got %v %q", task.GetState(), task.GetResult())
	}
	// The watch was opened first, so nothing between the read and the watch is missed.
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) != 1 || !slices.Equal(f.requests[0].GetTaskIds(), []string{"done"}) {
		t.Fatalf("watch requests %v", f.requests)
	}
}

func TestWaitResumesAfterTheLastEventWhenTheStreamDrops(t *testing.T) {
	f, admin := startFake(t)
	f.scripts = []watchScript{
		func(f *fakeAdmin, _ *pb.WatchTasksRequest, s grpc.ServerStreamingServer[pb.WatchTasksResponse]) error {
			f.set("t1", pb.TaskState_TASK_STATE_SUCCEEDED)
			if err := s.Send(succeeded(7, "t1")); err != nil {
				return err
			}
			return status.Error(codes.Unavailable, "the broker is restarting")
		},
		func(f *fakeAdmin, _ *pb.WatchTasksRequest, s grpc.ServerStreamingServer[pb.WatchTasksResponse]) error {
			f.set("t2", pb.TaskState_TASK_STATE_SUCCEEDED)
			return s.Send(succeeded(9, "t2"))
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tasks, err := taskbroker.WaitAll(ctx, admin, []string{"t1", "t2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 2 || tasks[0].GetId() != "t1" || tasks[1].GetId() != "t2" {
		t.Fatalf("tasks %v", tasks)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) != 2 {
		t.Fatalf("%d watch requests, want 2", len(f.requests))
	}
	first, second := f.requests[0], f.requests[1]
	if first.GetAfterEventId() != 0 || !slices.Equal(first.GetTaskIds(), []string{"t1", "t2"}) {
		t.Fatalf("first watch %v", first)
	}
	// Resumed after event 7, for the task still running.
	if second.GetAfterEventId() != 7 || !slices.Equal(second.GetTaskIds(), []string{"t2"}) {
		t.Fatalf("second watch %v", second)
	}
}

func TestWaitOnATaskThatFailedIsATaskFailedError(t *testing.T) {
	_, admin := startFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for id, want := range map[string]pb.TaskState{"dead": pb.TaskState_TASK_STATE_DEAD, "gone": pb.TaskState_TASK_STATE_CANCELLED} {
		task, err := taskbroker.Wait(ctx, admin, id)
		var failed *taskbroker.TaskFailedError
		if !errors.As(err, &failed) {
			t.Fatalf("Wait(%s) = %v, want a *TaskFailedError", id, err)
		}
		if failed.TaskID != id || failed.State != want || failed.LastError != "boom-"+id {
			t.Fatalf("Wait(%s) failed with %+v", id, failed)
		}
		wantMsg := "task " + id + " ended " + strings.TrimPrefix(want.String(), "TASK_STATE_") + ": boom-" + id
		if err.Error() != wantMsg {
			t.Fatalf("error %q, want %q", err, wantMsg)
		}
		if task.GetState() != want {
			t.Fatalf("Wait(%s) returned the task in %v", id, task.GetState())
		}
		// The typed reader of the same task says the same.
		_, rerr := taskbroker.ResultJSON[string](task)
		var again *taskbroker.TaskFailedError
		if !errors.As(rerr, &again) || *again != *failed {
			t.Fatalf("ResultJSON(%s) = %v, want %v", id, rerr, failed)
		}
	}
	if _, err := taskbroker.Wait(ctx, admin, "done"); err != nil {
		t.Fatalf("a SUCCEEDED task: %v", err)
	}
}

func TestWaitGivesUpWhenTheContextEnds(t *testing.T) {
	_, admin := startFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := taskbroker.Wait(ctx, admin, "t1")
	var timeout *taskbroker.WaitTimeoutError
	if !errors.As(err, &timeout) || !errors.Is(err, context.DeadlineExceeded) || !slices.Equal(timeout.TaskIDs, []string{"t1"}) {
		t.Fatalf("err %v, want a WaitTimeoutError for t1", err)
	}
}

func TestWaitReturnsWhatIsNotADroppedStream(t *testing.T) {
	_, admin := startFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := taskbroker.Wait(ctx, admin, "nope"); status.Code(err) != codes.NotFound {
		t.Fatalf("err %v, want NOT_FOUND", err)
	}
}

func TestADependentRunsAfterItsDependencyAndSubmitAndWaitGetsTheResult(t *testing.T) {
	addr := os.Getenv("TASKBROKER_ADDR")
	if addr == "" {
		t.Skip("TASKBROKER_ADDR is not set; needs a live broker")
	}
	conn, err := taskbroker.NewClient(addr, taskbroker.FromEnv())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	broker, admin := pb.NewBrokerServiceClient(conn), pb.NewAdminServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	queue := "test.go.flow." + time.Now().Format("150405.000000")
	sub, err := broker.Submit(ctx, &pb.SubmitRequest{Tasks: []*pb.TaskSpec{
		{Queue: queue, Payload: []byte("a")},
		{Queue: queue, Payload: []byte("b"), DependsOnIndex: []uint32{0}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := sub.GetResults()[0].GetTaskId(), sub.GetResults()[1].GetTaskId()
	got, err := admin.GetTask(ctx, &pb.GetTaskRequest{TaskId: b})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetTask().GetState() != pb.TaskState_TASK_STATE_BLOCKED || !slices.Equal(got.GetTask().GetDependsOn(), []string{a}) {
		t.Fatalf("b is %v depending on %v, want BLOCKED on %s", got.GetTask().GetState(), got.GetTask().GetDependsOn(), a)
	}
	var mu sync.Mutex
	var order []string
	cfg := worker.Config{Queues: []string{queue}, WorkerID: "test-go-flow", PollWait: time.Second}
	w, err := worker.New(conn, cfg, func(_ context.Context, task *worker.Task) ([]byte, error) {
		mu.Lock()
		order = append(order, string(task.GetPayload()))
		mu.Unlock()
		return append([]byte("done-"), task.GetPayload()...), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	defer func() { stop(); <-ran }()
	tasks, err := taskbroker.WaitAll(ctx, admin, []string{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if string(tasks[0].GetResult()) != "done-a" || string(tasks[1].GetResult()) != "done-b" {
		t.Fatalf("results %q %q", tasks[0].GetResult(), tasks[1].GetResult())
	}
	mu.Lock()
	if !slices.Equal(order, []string{"a", "b"}) {
		t.Fatalf("ran %v, want [a b]", order)
	}
	mu.Unlock()
	task, err := taskbroker.SubmitAndWait(ctx, broker, admin, &pb.TaskSpec{Queue: queue, Payload: []byte("c"), DependsOn: []string{b}})
	if err != nil {
		t.Fatal(err)
	}
	if task.GetState() != pb.TaskState_TASK_STATE_SUCCEEDED || string(task.GetResult()) != "done-c" {
		t.Fatalf("c is %v with %q", task.GetState(), task.GetResult())
	}
}
