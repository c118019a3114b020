package worker

import (
	"context"
	"fmt"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
)

// TypedFunc does the work of one task whose payload decoded into a T; its R is encoded as
// the task's result.
type TypedFunc[T, R any] func(ctx context.Context, task *Task, payload T) (R, error)

// HandleJSON makes a Handler of fn: the payload is decoded from JSON into a T and fn's R is
// encoded as JSON into the result.
//
//	type Email struct{ To string `json:"to"` }
//	mux.Handle("emails", worker.HandleJSON(func(ctx context.Context, t *worker.Task, e Email) (Receipt, error) {
//		return send(ctx, e)
//	}))
func HandleJSON[T, R any](fn TypedFunc[T, R]) Handler { return HandleWith(taskbroker.JSON, fn) }

// HandleWith is HandleJSON with the Serializer s. A payload that does not decode fails the
// attempt at once as non-retryable (the task goes DEAD: no retry can fix its payload), with
// an error naming the queue and T; a result that does not encode fails the attempt (retried
// under the task's policy: a fixed deploy may run it again).
func HandleWith[T, R any](s taskbroker.Serializer, fn TypedFunc[T, R]) Handler {
	return func(ctx context.Context, task *Task) ([]byte, error) {
		var payload T
		if err := s.Decode(task.GetPayload(), &payload); err != nil {
			return nil, Permanentf("queue %s: payload is not a valid %s: %v", task.GetQueue(), taskbroker.TypeName[T](), err)
		}
		result, err := fn(ctx, task, payload)
		if err != nil {
			return nil, err
		}
		out, err := s.Encode(result)
		if err != nil {
			return nil, fmt.Errorf("queue %s: the handler's result %s could not be encoded: %w", task.GetQueue(), taskbroker.TypeName[R](), err)
		}
		return out, nil
	}
}

// DependencyResultJSON decodes the result of the dependency taskID (task.GetDependencyResults:
// task id -> result of each SUCCEEDED dependency) as JSON into an R. An error when taskID is
// not there or does not decode.
func DependencyResultJSON[R any](task *Task, taskID string) (R, error) {
	return DependencyResultWith[R](taskbroker.JSON, task, taskID)
}

// DependencyResultWith is DependencyResultJSON with the Serializer s.
func DependencyResultWith[R any](s taskbroker.Serializer, task *Task, taskID string) (R, error) {
	var r R
	data, ok := task.GetDependencyResults()[taskID]
	if !ok {
		return r, fmt.Errorf("task %s has no result of a dependency %s", task.GetTaskId(), taskID)
	}
	if err := s.Decode(data, &r); err != nil {
		return r, fmt.Errorf("the result of dependency %s is not a valid %s: %w", taskID, taskbroker.TypeName[R](), err)
	}
	return r, nil
}
