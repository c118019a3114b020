package taskbroker

// Waiting for tasks to finish (Flow): Wait, WaitAll and SubmitAndWait follow the tasks on
// AdminService.WatchTasks instead of polling. The watch is opened first and its response
// headers awaited (from then on every matching event arrives on it), then each task is read
// once with GetTask: an outcome from before the watch is seen by the read, one from after by
// the stream, so none is missed and a finished task returns at once. When the stream drops
// (UNAVAILABLE or a clean end: a broker restart, a network blip) the watch is opened again
// after the last event received (after_event_id) and the tasks read again, with a short
// growing pause, until ctx ends.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// MaxWaitTasks is how many tasks one WaitAll follows (WatchTasks' limit).
const MaxWaitTasks = 1000

const (
	firstWaitPause = 50 * time.Millisecond
	maxWaitPause   = time.Second
)

// Only the events that can end a task are streamed.
var finalKinds = []pb.TaskEventKind{
	pb.TaskEventKind_TASK_EVENT_KIND_SUCCEEDED,
	pb.TaskEventKind_TASK_EVENT_KIND_DEAD,
	pb.TaskEventKind_TASK_EVENT_KIND_CANCELLED,
}

// IsFinal reports whether a task in state s is done: SUCCEEDED, DEAD or CANCELLED.
func IsFinal(s pb.TaskState) bool {
	return s == pb.TaskState_TASK_STATE_SUCCEEDED || s == pb.TaskState_TASK_STATE_DEAD ||
		s == pb.TaskState_TASK_STATE_CANCELLED
}

// WaitTimeoutError is returned when ctx ends before the tasks finish; the tasks carry on.
// errors.Is(err, context.DeadlineExceeded) (or context.Canceled) holds.
type WaitTimeoutError struct {
	// TaskIDs are the tasks not finished yet.
	TaskIDs []string
	Err     error
}

func (e *WaitTimeoutError) Error() string {
	ids := e.TaskIDs
	if len(ids) > 5 {
		ids = ids[:5]
	}
	return fmt.Sprintf("%d task(s) not finished: %s: %v", len(e.TaskIDs), strings.Join(ids, ", "), e.Err)
}

func (e *WaitTimeoutError) Unwrap() error { return e.Err }

// TaskFailedError is what waiting for a task that ended DEAD or CANCELLED returns (Wait,
// SubmitAndWait, ResultJSON, ResultWith): the task's id, its final state and its last error
// (the message of its last failed attempt, or empty).
//
//	var failed *taskbroker.TaskFailedError
//	if errors.As(err, &failed) { log.Print(failed.TaskID, failed.State, failed.LastError) }
type TaskFailedError struct {
	TaskID    string
	State     pb.TaskState
	LastError string
}

func (e *TaskFailedError) Error() string {
	msg := fmt.Sprintf("task %s ended %s", e.TaskID, stateName(e.State))
	if e.LastError != "" {
		msg += ": " + e.LastError
	}
	return msg
}

// stateName is DEAD for TASK_STATE_DEAD.
func stateName(s pb.TaskState) string { return strings.TrimPrefix(s.String(), "TASK_STATE_") }

// TaskFailed is the *TaskFailedError of a DEAD or CANCELLED task, nil for any other.
func TaskFailed(task *pb.Task) error { return taskFailed(task) }

func taskFailed(task *pb.Task) error {
	switch s := task.GetState(); s {
	case pb.TaskState_TASK_STATE_DEAD, pb.TaskState_TASK_STATE_CANCELLED:
		return &TaskFailedError{TaskID: task.GetId(), State: s, LastError: task.GetLastError()}
	}
	return nil
}

// Wait blocks until the task is SUCCEEDED, DEAD or CANCELLED and returns it (State, Result,
// LastError). A task that ended DEAD or CANCELLED comes back with a *TaskFailedError (and the
// task itself). Give ctx a deadline: when it ends first the error is a *WaitTimeoutError.
//
//	ctx, cancel := context.WithTimeout(ctx, time.Minute)
//	defer cancel()
//	task, err := taskbroker.Wait(ctx, pb.NewAdminServiceClient(conn), id)
func Wait(ctx context.Context, admin pb.AdminServiceClient, taskID string) (*pb.Task, error) {
	tasks, err := WaitAll(ctx, admin, []string{taskID})
	if err != nil {
		return nil, err
	}
	return tasks[0], taskFailed(tasks[0])
}

// SubmitAndWait submits spec (with the trace context of ctx, as InjectTrace) and Waits for it:
// a task that ended DEAD or CANCELLED comes back with a *TaskFailedError.
func SubmitAndWait(ctx context.Context, broker pb.BrokerServiceClient, admin pb.AdminServiceClient, spec *pb.TaskSpec) (*pb.Task, error) {
	InjectTrace(ctx, spec)
	results, err := Submit(ctx, broker, spec)
	if err != nil {
		return nil, err
	}
	return Wait(ctx, admin, results[0].GetTaskId())
}

// WaitAll is Wait for up to MaxWaitTasks tasks on one stream; the tasks come back in the order
// of taskIDs, whatever their final state (read each one's State; TaskFailed(task) gives the
// *TaskFailedError of a DEAD or CANCELLED one).
func WaitAll(ctx context.Context, admin pb.AdminServiceClient, taskIDs []string) ([]*pb.Task, error) {
	var ids []string
	for _, id := range taskIDs {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, errors.New("taskbroker.WaitAll: no task ids")
	}
	if len(ids) > MaxWaitTasks {
		return nil, fmt.Errorf("taskbroker.WaitAll: %d task ids, at most %d", len(ids), MaxWaitTasks)
	}
	w := &waiter{admin: admin, ids: ids, done: map[string]*pb.Task{}}
	pause := firstWaitPause
	for {
		pending := w.pending()
		if len(pending) == 0 {
			out := make([]*pb.Task, len(taskIDs))
			for i, id := range taskIDs {
				out[i] = w.done[id]
			}
			return out, nil
		}
		if ctx.Err() != nil {
			return nil, &WaitTimeoutError{TaskIDs: pending, Err: ctx.Err()}
		}
		progressed, err := w.follow(ctx, pending)
		switch {
		case ctx.Err() != nil:
			return nil, &WaitTimeoutError{TaskIDs: w.pending(), Err: ctx.Err()}
		case status.Code(err) == codes.DeadlineExceeded:
			// The broker ended the watch at ctx's deadline (sent as grpc-timeout)
			// a moment before ctx itself was done here.
			return nil, &WaitTimeoutError{TaskIDs: w.pending(), Err: context.DeadlineExceeded}
		case err == nil || errors.Is(err, io.EOF) || status.Code(err) == codes.Unavailable:
			// The stream dropped: open it again after the last event.
		default:
			return nil, err
		}
		if progressed {
			pause = firstWaitPause
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(pause*2, maxWaitPause)
	}
}

type waiter struct {
	admin pb.AdminServiceClient
	ids   []string
	done  map[string]*pb.Task
	after uint64
}

func (w *waiter) pending() []string {
	var out []string
	for _, id := range w.ids {
		if w.done[id] == nil {
			out = append(out, id)
		}
	}
	return out
}

func (w *waiter) read(ctx context.Context, id string) error {
	resp, err := w.admin.GetTask(ctx, &pb.GetTaskRequest{TaskId: id})
	if err != nil {
		return err
	}
	if IsFinal(resp.GetTask().GetState()) {
		w.done[id] = resp.GetTask()
	}
	return nil
}

// follow opens one watch and reads until every task finished (nil) or the stream ends (its
// error; io.EOF for a clean end). progressed: an event arrived.
func (w *waiter) follow(ctx context.Context, pending []string) (progressed bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream when every task finished
	stream, err := w.admin.WatchTasks(ctx, &pb.WatchTasksRequest{TaskIds: pending, Kinds: finalKinds, AfterEventId: w.after})
	if err != nil {
		return false, err
	}
	// The headers mean the broker accepted the watch: later events will arrive on it.
	if _, err := stream.Header(); err != nil {
		return false, err
	}
	for _, id := range pending {
		if err := w.read(ctx, id); err != nil {
			return false, err
		}
	}
	for len(w.pending()) > 0 {
		resp, err := stream.Recv()
		if err != nil {
			return progressed, err
		}
		progressed = true
		for _, ev := range resp.GetEvents() {
			w.after = max(w.after, ev.GetEventId())
			if id := ev.GetTaskId(); w.done[id] == nil && slices.Contains(w.ids, id) {
				if err := w.read(ctx, id); err != nil {
					return progressed, err
				}
			}
		}
	}
	return progressed, nil
}
