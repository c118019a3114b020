package taskbroker

import (
	"context"
	"errors"
	"iter"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// Client is one handle on a broker: the connection (a grpc.ClientConnInterface, so it goes to
// worker.New and Mux.Worker as it is), the generated stubs for everything else (Broker, Admin,
// Schedules), and the operator calls as methods returning TaskInfo and Explanation values
// (and Bucket and Cooldown values: buckets.go).
//
//	c, err := taskbroker.Connect("127.0.0.1:50051")
//	defer c.Close()
//	res, err := taskbroker.SubmitJSON(ctx, c.Broker, "emails", Email{To: "ada@example.com"})
//	t, err := c.GetTask(ctx, res.GetTaskId())
//	fmt.Println(t.State) // READY
type Client struct {
	*grpc.ClientConn
	Broker    pb.BrokerServiceClient
	Admin     pb.AdminServiceClient
	Schedules pb.ScheduleServiceClient
}

// Connect opens a connection as NewClient does and wraps it with its stubs.
func Connect(target string, opts ...Option) (*Client, error) {
	conn, err := NewClient(target, opts...)
	if err != nil {
		return nil, err
	}
	return Wrap(conn), nil
}

// Wrap makes a Client of a connection opened elsewhere; closing the Client closes it.
func Wrap(conn *grpc.ClientConn) *Client {
	return &Client{
		ClientConn: conn,
		Broker:     pb.NewBrokerServiceClient(conn),
		Admin:      pb.NewAdminServiceClient(conn),
		Schedules:  pb.NewScheduleServiceClient(conn),
	}
}

// TaskState is a task's state by name: "SCHEDULED", "READY", "LEASED", "SUCCEEDED", "DEAD",
// "CANCELLED", "BLOCKED".
type TaskState string

const (
	StateScheduled TaskState = "SCHEDULED"
	StateReady     TaskState = "READY"
	StateLeased    TaskState = "LEASED"
	StateSucceeded TaskState = "SUCCEEDED"
	StateDead      TaskState = "DEAD"
	StateCancelled TaskState = "CANCELLED"
	StateBlocked   TaskState = "BLOCKED"
)

func stateOf(s pb.TaskState) TaskState { return TaskState(stateName(s)) }

func (s TaskState) proto() (pb.TaskState, error) {
	v, ok := pb.TaskState_value["TASK_STATE_"+string(s)]
	if !ok || v == 0 {
		return 0, errors.New("taskbroker: unknown task state " + string(s))
	}
	return pb.TaskState(v), nil
}

// TaskInfo is a task as the broker has it. Times that are not set are zero; Proto is the message
// as it came, for the fields not copied here.
type TaskInfo struct {
	ID              string
	Queue           string
	Key             string
	State           TaskState
	Attempt         uint32
	MaxAttempts     uint32
	Priority        int32
	Payload         []byte
	Result          []byte
	LastError       string
	Metadata        map[string]string
	RunAt           time.Time
	Deadline        time.Time
	CreatedAt       time.Time
	UpdatedAt       time.Time
	FinishedAt      time.Time
	LeasedBy        string
	LeaseExpiresAt  time.Time
	CancelRequested bool
	// "OPERATOR" or "DEPENDENCY_FAILED" for a CANCELLED task, empty otherwise.
	CancelReason string
	// The limit bucket the task counts against, as submitted (empty: its queue's, if any).
	Bucket string
	Proto  *pb.Task
}

func timeOf(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

// TaskInfoOf converts a task message into a TaskInfo.
func TaskInfoOf(t *pb.Task) *TaskInfo {
	if t == nil {
		return nil
	}
	reason := ""
	if t.GetCancelReason() != pb.CancelReason_CANCEL_REASON_UNSPECIFIED {
		reason = strings.TrimPrefix(t.GetCancelReason().String(), "CANCEL_REASON_")
	}
	return &TaskInfo{
		ID: t.GetId(), Queue: t.GetQueue(), Key: t.GetKey(), State: stateOf(t.GetState()),
		Attempt: t.GetAttempt(), MaxAttempts: t.GetMaxAttempts(), Priority: t.GetPriority(),
		Payload: t.GetPayload(), Result: t.GetResult(), LastError: t.GetLastError(), Metadata: t.GetMetadata(),
		RunAt: timeOf(t.GetRunAt()), Deadline: timeOf(t.GetDeadline()), CreatedAt: timeOf(t.GetCreatedAt()),
		UpdatedAt: timeOf(t.GetUpdatedAt()), FinishedAt: timeOf(t.GetFinishedAt()), LeasedBy: t.GetLeasedBy(),
		LeaseExpiresAt: timeOf(t.GetLeaseExpiresAt()), CancelRequested: t.GetCancelRequested(),
		CancelReason: reason, Bucket: t.GetBucket(), Proto: t,
	}
}

// Gate is one reason a waiting task is not leased now. Kind is the GateKind's name without its
// prefix ("RUN_AT_IN_FUTURE", "QUEUE_PAUSED", ... and "NONE": nothing holds it).
type Gate struct {
	Kind          string
	Detail        string
	Until         time.Time
	HolderTaskIDs []string
	Ahead         uint64
}

// Explanation says what holds a task (ExplainTask). Gates is empty when the task is not
// waiting (leased or finished). LeasePath is "PLAIN", "ROUTED" or "GATED" for a waiting task,
// empty otherwise.
type Explanation struct {
	TaskID    string
	State     TaskState
	Gates     []Gate
	LeasePath string
}

// TaskFilter selects tasks for ListTasks; the zero value selects every task.
type TaskFilter struct {
	Queue         string
	States        []TaskState
	Key           string
	WorkerID      string
	FanoutGroup   string
	ScheduleID    string
	CreatedAfter  time.Time
	CreatedBefore time.Time
	// Only tasks whose target names this worker.
	TargetWorker string
	// Only tasks whose target labels include every pair (at most 32).
	TargetLabels map[string]string
	// Only tasks whose metadata has this key; with MetadataValue, mapped to that value
	// (a value without a key is INVALID_ARGUMENT).
	MetadataKey   string
	MetadataValue string
	// Tasks per call (the broker's default when 0); ListTasks reads every page.
	PageSize int32
}

func (f TaskFilter) request() (*pb.ListTasksRequest, error) {
	req := &pb.ListTasksRequest{Queue: f.Queue, Key: f.Key, WorkerId: f.WorkerID,
		FanoutGroup: f.FanoutGroup, ScheduleId: f.ScheduleID, TargetWorkerId: f.TargetWorker,
		TargetLabels: f.TargetLabels, MetadataKey: f.MetadataKey, MetadataValue: f.MetadataValue,
		PageSize: f.PageSize}
	for _, s := range f.States {
		v, err := s.proto()
		if err != nil {
			return nil, err
		}
		req.States = append(req.States, v)
	}
	if !f.CreatedAfter.IsZero() {
		req.CreatedAfter = timestamppb.New(f.CreatedAfter)
	}
	if !f.CreatedBefore.IsZero() {
		req.CreatedBefore = timestamppb.New(f.CreatedBefore)
	}
	return req, nil
}

// GetTask reads one task, with its payload, result and checkpoint.
func (c *Client) GetTask(ctx context.Context, taskID string) (*TaskInfo, error) {
	r, err := c.Admin.GetTask(ctx, &pb.GetTaskRequest{TaskId: taskID})
	if err != nil {
		return nil, err
	}
	return TaskInfoOf(r.GetTask()), nil
}

// ListTasks yields every task matching f, newest first, reading a page at a time as the loop
// goes; breaking out of the loop stops reading. An error is yielded once, last.
//
//	for t, err := range c.ListTasks(ctx, taskbroker.TaskFilter{Queue: "emails"}) { ... }
func (c *Client) ListTasks(ctx context.Context, f TaskFilter) iter.Seq2[*TaskInfo, error] {
	return func(yield func(*TaskInfo, error) bool) {
		req, err := f.request()
		if err != nil {
			yield(nil, err)
			return
		}
		for {
			r, err := c.Admin.ListTasks(ctx, req)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, t := range r.GetTasks() {
				if !yield(TaskInfoOf(t), nil) {
					return
				}
			}
			if r.GetNextPageToken() == "" {
				return
			}
			req.PageToken = r.GetNextPageToken()
		}
	}
}

// CancelTask cancels a task: SCHEDULED, READY or BLOCKED ones are CANCELLED at once, a LEASED
// one is marked CancelRequested and its worker told on its next heartbeat.
func (c *Client) CancelTask(ctx context.Context, taskID string) (*TaskInfo, error) {
	r, err := c.Admin.CancelTask(ctx, &pb.CancelTaskRequest{TaskId: taskID})
	if err != nil {
		return nil, err
	}
	return TaskInfoOf(r.GetTask()), nil
}

// RequeueTask makes a DEAD or CANCELLED task READY again, with a fresh budget of attempts.
func (c *Client) RequeueTask(ctx context.Context, taskID string) (*TaskInfo, error) {
	r, err := c.Admin.RequeueTask(ctx, &pb.RequeueTaskRequest{TaskId: taskID})
	if err != nil {
		return nil, err
	}
	return TaskInfoOf(r.GetTask()), nil
}

// ExplainTask says which gates hold a task that is not running.
func (c *Client) ExplainTask(ctx context.Context, taskID string) (*Explanation, error) {
	r, err := c.Admin.ExplainTask(ctx, &pb.ExplainTaskRequest{TaskId: taskID})
	if err != nil {
		return nil, err
	}
	e := &Explanation{TaskID: r.GetTaskId(), State: stateOf(r.GetState())}
	if r.GetLeasePath() != pb.LeasePath_LEASE_PATH_UNSPECIFIED {
		e.LeasePath = strings.TrimPrefix(r.GetLeasePath().String(), "LEASE_PATH_")
	}
	for _, g := range r.GetGates() {
		e.Gates = append(e.Gates, Gate{
			Kind: strings.TrimPrefix(g.GetKind().String(), "GATE_KIND_"), Detail: g.GetDetail(),
			Until: timeOf(g.GetUntil()), HolderTaskIDs: g.GetHolderTaskIds(), Ahead: g.GetAhead(),
		})
	}
	return e, nil
}

// Wait blocks until the task is SUCCEEDED (see the package function Wait).
func (c *Client) Wait(ctx context.Context, taskID string) (*pb.Task, error) {
	return Wait(ctx, c.Admin, taskID)
}

// Submit submits tasks in one request (see the package function Submit).
func (c *Client) Submit(ctx context.Context, specs ...*pb.TaskSpec) ([]*pb.SubmitResult, error) {
	return Submit(ctx, c.Broker, specs...)
}
