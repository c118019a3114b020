// The conformance case keys_and_replace, for the Go client: README.md beside this file says what
// it does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func init() { register("keys_and_replace", keysAndReplace) }

// rawBytes is a Serializer that sends a []byte payload as it is, so SubmitJSON's options
// (WithKey, WithDependsOnKeys, WithOnDuplicateKey...) carry the scenario's plain payloads.
type rawBytes struct{}

func (rawBytes) Encode(v any) ([]byte, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("rawBytes encodes []byte, not %T", v)
	}
	return b, nil
}

func (rawBytes) Decode(data []byte, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawBytes decodes into *[]byte, not %T", v)
	}
	*p = data
	return nil
}

// keysAndReplace: b depends on the key k-a before any task has it; a second submission of
// the key digest replaces the waiting first one; a's result reaches b's lease.
func keysAndReplace(ctx context.Context, e *env, q string) error {
	submit := func(step, payload string, opts ...taskbroker.SubmitOption) (*pb.SubmitResult, error) {
		opts = append(opts, taskbroker.WithSerializer(rawBytes{}))
		r, err := taskbroker.SubmitJSON(ctx, e.broker, q, []byte(payload), opts...)
		if err != nil {
			return nil, fmt.Errorf("Submit %s: %w", step, err)
		}
		return r, nil
	}
	b, err := submit("b", "b", taskbroker.WithDependsOnKeys(taskbroker.TaskKeyOf(q, "k-a")))
	if err != nil {
		return err
	}
	tb, err := getTask(ctx, e, b.GetTaskId())
	if err != nil {
		return err
	}
	if tb.GetState() != pb.TaskState_TASK_STATE_BLOCKED {
		return fmt.Errorf("b is %v, want BLOCKED", tb.GetState())
	}
	now := time.Now()
	first, err := submit("digest v1", "v1", taskbroker.WithKey("digest"), taskbroker.WithRunAt(now.Add(time.Hour)))
	if err != nil {
		return err
	}
	second, err := submit("digest v2", "v2", taskbroker.WithKey("digest"), taskbroker.WithRunAt(now),
		taskbroker.WithOnDuplicateKey(pb.DuplicateKeyPolicy_DUPLICATE_KEY_POLICY_REPLACE_WAITING))
	if err != nil {
		return err
	}
	if second.GetTaskId() != first.GetTaskId() || !second.GetDeduplicated() || !second.GetReplaced() {
		return fmt.Errorf("the second submit of digest answered %s (deduplicated %v, replaced %v), want %s with both true",
			second.GetTaskId(), second.GetDeduplicated(), second.GetReplaced(), first.GetTaskId())
	}
	d := first.GetTaskId()
	a, err := submit("a", "a", taskbroker.WithKey("k-a"))
	if err != nil {
		return err
	}
	aID := a.GetTaskId()
	got, err := lease(ctx, e, q, 10, 30*time.Second, 0)
	if err != nil {
		return err
	}
	ids := make([]string, 0, len(got))
	for _, t := range got {
		ids = append(ids, t.GetTaskId())
	}
	want := []string{aID, d}
	slices.Sort(ids)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		return fmt.Errorf("the first Lease returned %v, want exactly a %s and d %s", ids, aID, d)
	}
	for _, t := range got {
		result := []byte("a-result")
		if t.GetTaskId() == d {
			if string(t.GetPayload()) != "v2" {
				return fmt.Errorf("d was leased with payload %q, want v2", t.GetPayload())
			}
			result = nil
		}
		if err := complete(ctx, e, t, result); err != nil {
			return err
		}
	}
	if tb, err = getTask(ctx, e, b.GetTaskId()); err != nil {
		return err
	}
	if tb.GetState() != pb.TaskState_TASK_STATE_READY {
		return fmt.Errorf("after a's Complete b is %v, want READY", tb.GetState())
	}
	if got, err = lease(ctx, e, q, 10, 30*time.Second, 5*time.Second); err != nil {
		return err
	}
	if len(got) != 1 || got[0].GetTaskId() != b.GetTaskId() {
		return fmt.Errorf("the second Lease returned %s, want exactly b %s", describe(got), b.GetTaskId())
	}
	results := got[0].GetDependencyResults()
	if len(results) != 1 || string(results[aID]) != "a-result" {
		return fmt.Errorf("b was leased with dependency_results %q, want {%s: a-result}", results, aID)
	}
	return complete(ctx, e, got[0], nil)
}
