package taskbroker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

type order struct {
	ID    string `json:"id"`
	Items int    `json:"items"`
}

// upper is a Serializer of strings that upper-cases them on the wire.
type upper struct{}

func (upper) Encode(v any) ([]byte, error) {
	s, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("upper encodes strings, not %T", v)
	}
	return []byte(strings.ToUpper(s)), nil
}

func (upper) Decode(data []byte, v any) error {
	p, ok := v.(*string)
	if !ok {
		return errors.New("upper decodes into *string")
	}
	*p = strings.ToLower(string(data))
	return nil
}

func TestSubmitJSONEncodesThePayloadAndKeepsTheSpec(t *testing.T) {
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
	queue := "test.go.typed." + t.Name()
	template := &pb.TaskSpec{Key: "order-7", Priority: 3}
	first, err := taskbroker.SubmitJSON(ctx, broker, queue, order{ID: "7", Items: 2}, taskbroker.WithTask(template))
	if err != nil {
		t.Fatal(err)
	}
	again, err := taskbroker.SubmitJSON(ctx, broker, queue, order{ID: "7", Items: 2}, taskbroker.WithTask(template))
	if err != nil {
		t.Fatal(err)
	}
	if !again.GetDeduplicated() || again.GetTaskId() != first.GetTaskId() || template.GetQueue() != "" {
		t.Errorf("second submit %+v of %s; want it deduplicated by the template's key, the template untouched", again, first.GetTaskId())
	}
	resp, err := admin.GetTask(ctx, &pb.GetTaskRequest{TaskId: first.GetTaskId()})
	if err != nil {
		t.Fatal(err)
	}
	var got order
	if err := json.Unmarshal(resp.GetTask().GetPayload(), &got); err != nil || got != (order{ID: "7", Items: 2}) || resp.GetTask().GetPriority() != 3 {
		t.Errorf("stored payload %q priority %d", resp.GetTask().GetPayload(), resp.GetTask().GetPriority())
	}

	up, err := taskbroker.SubmitJSON(ctx, broker, queue, "hello", taskbroker.WithSerializer(upper{}))
	if err != nil {
		t.Fatal(err)
	}
	resp, err = admin.GetTask(ctx, &pb.GetTaskRequest{TaskId: up.GetTaskId()})
	if err != nil || string(resp.GetTask().GetPayload()) != "HELLO" {
		t.Errorf("payload %q (%v), want the serializer's HELLO", resp.GetTask().GetPayload(), err)
	}
}

func TestSubmitJSONRefusesWhatDoesNotEncode(t *testing.T) {
	// No call is made: a nil client would panic if it were.
	_, err := taskbroker.SubmitJSON(context.Background(), nil, "q", map[string]any{"c": make(chan int)})
	if err == nil || !strings.Contains(err.Error(), `the payload map[string]interface {} for queue "q" could not be encoded`) {
		t.Errorf("err = %v", err)
	}
}

func TestResultsDecodeIntoTheirType(t *testing.T) {
	task := &pb.Task{Id: "t1", Result: []byte(`{"id":"7","items":2}`)}
	o, err := taskbroker.ResultJSON[order](task)
	if err != nil || o != (order{ID: "7", Items: 2}) {
		t.Errorf("ResultJSON = %+v, %v", o, err)
	}
	_, err = taskbroker.ResultJSON[order](&pb.Task{Id: "t2", Result: []byte("not json")})
	if err == nil || !strings.Contains(err.Error(), "the result of task t2 is not a valid order") {
		t.Errorf("err = %v, want it to name the task and the type", err)
	}
	_, err = taskbroker.ResultJSON[order](&pb.Task{Id: "t3", State: pb.TaskState_TASK_STATE_READY})
	if err == nil || err.Error() != "taskbroker: task t3 is READY, not SUCCEEDED" {
		t.Errorf("err = %v, want it to name the state", err)
	}
	s, err := taskbroker.ResultWith[string](upper{}, &pb.Task{Result: []byte("DONE")})
	if err != nil || s != "done" {
		t.Errorf("ResultWith = %q, %v", s, err)
	}
}
