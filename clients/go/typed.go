package taskbroker

// Typed payloads and results: a Serializer turns values into the bytes of a task's payload
// or result and back. JSON is the default; any other encoding (protobuf, msgpack, gob) plugs
// in through WithSerializer, ResultWith and worker.HandleWith.
//
//	res, err := taskbroker.SubmitJSON(ctx, broker, "emails", Email{To: "ada@example.com"})
//	task, err := taskbroker.Wait(ctx, admin, res.GetTaskId())
//	sent, err := taskbroker.ResultJSON[Receipt](task)

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"google.golang.org/protobuf/proto"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// Serializer encodes values into payload and result bytes and decodes them back.
type Serializer interface {
	// Encode returns the bytes of v.
	Encode(v any) ([]byte, error)
	// Decode fills the value v points to from data.
	Decode(data []byte, v any) error
}

// JSON is the default Serializer: encoding/json, UTF-8.
var JSON Serializer = jsonSerializer{}

type jsonSerializer struct{}

func (jsonSerializer) Encode(v any) ([]byte, error)    { return json.Marshal(v) }
func (jsonSerializer) Decode(data []byte, v any) error { return json.Unmarshal(data, v) }

// TypeName is how errors name T: its own name ("Email"), else its spelling ("map[string]int").
func TypeName[T any]() string {
	t := reflect.TypeFor[T]()
	if t.Name() != "" {
		return t.Name()
	}
	return t.String()
}

// SubmitOption changes what SubmitJSON submits.
type SubmitOption func(*submitOptions)

type submitOptions struct {
	spec       *pb.TaskSpec
	edits      []func(*pb.TaskSpec)
	serializer Serializer
}

// WithSerializer encodes the payload with s instead of JSON.
func WithSerializer(s Serializer) SubmitOption {
	return func(o *submitOptions) { o.serializer = s }
}

// WithTask submits a copy of spec (key, priority, retry policy, run_at, routing, ...) with
// the queue and the encoded payload filled in; the field options (WithKey, WithDependsOn...)
// apply on top of it.
//
//	taskbroker.SubmitJSON(ctx, broker, "emails", email,
//		taskbroker.WithTask(&pb.TaskSpec{Key: "welcome-ada", Priority: 5}))
func WithTask(spec *pb.TaskSpec) SubmitOption {
	return func(o *submitOptions) { o.spec = spec }
}

// SubmitJSON encodes v (JSON unless WithSerializer says otherwise) and submits it as one task
// on queue, every TaskSpec field an option (WithKey, WithDependsOnKeys, WithOnDuplicateKey,
// WithAtMostOnce...); the result says the task's id, whether its key deduplicated it and
// whether it replaced a waiting task (GetReplaced). Backpressure is retried as Submit does.
// Raw bytes go through Submit with a TaskSpec.
func SubmitJSON[T any](ctx context.Context, broker pb.BrokerServiceClient, queue string, v T, opts ...SubmitOption) (*pb.SubmitResult, error) {
	o := submitOptions{serializer: JSON}
	for _, opt := range opts {
		opt(&o)
	}
	payload, err := o.serializer.Encode(v)
	if err != nil {
		return nil, fmt.Errorf("taskbroker: the payload %s for queue %q could not be encoded: %w", TypeName[T](), queue, err)
	}
	spec := &pb.TaskSpec{}
	if o.spec != nil {
		spec = proto.Clone(o.spec).(*pb.TaskSpec)
	}
	for _, f := range o.edits {
		f(spec)
	}
	spec.Queue, spec.Payload = queue, payload
	results, err := Submit(ctx, broker, spec)
	if err != nil {
		return nil, err
	}
	return results[0], nil
}

// ResultJSON decodes a finished task's result (GetTask, Wait) as JSON into an R. A task that
// ended DEAD or CANCELLED is a *TaskFailedError; one not finished yet is an error naming its
// state.
func ResultJSON[R any](task *pb.Task) (R, error) { return ResultWith[R](JSON, task) }

// ResultWith decodes a finished task's result with s into an R (errors as ResultJSON).
func ResultWith[R any](s Serializer, task *pb.Task) (R, error) {
	var r R
	if err := taskFailed(task); err != nil {
		return r, err
	}
	if st := task.GetState(); st != pb.TaskState_TASK_STATE_SUCCEEDED && st != pb.TaskState_TASK_STATE_UNSPECIFIED {
		return r, fmt.Errorf("taskbroker: task %s is %s, not SUCCEEDED", task.GetId(), stateName(st))
	}
	if err := s.Decode(task.GetResult(), &r); err != nil {
		return r, fmt.Errorf("taskbroker: the result of task %s is not a valid %s: %w", task.GetId(), TypeName[R](), err)
	}
	return r, nil
}
