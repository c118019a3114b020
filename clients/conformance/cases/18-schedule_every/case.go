// The conformance case schedule_every, for the Go client: README.md beside this file says what it
// does and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it
// belongs to.

package main

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func init() { register("schedule_every", scheduleEvery) }

// scheduleEvery: an `every 1s` schedule makes tasks that run; then it is deleted.
func scheduleEvery(ctx context.Context, e *env, q string) error {
	created, err := e.schedules.CreateSchedule(ctx, &pb.CreateScheduleRequest{Schedule: &pb.Schedule{
		ScheduleId: q,
		Spec:       &pb.ScheduleSpec{Kind: &pb.ScheduleSpec_Every{Every: durationpb.New(time.Second)}},
		Task:       &pb.TaskTemplate{Queue: q, Payload: []byte("tick")},
		Overlap:    pb.OverlapPolicy_OVERLAP_POLICY_ALLOW,
	}})
	if err != nil {
		return fmt.Errorf("CreateSchedule: %w", err)
	}
	if created.GetSchedule().GetState() != pb.ScheduleState_SCHEDULE_STATE_ACTIVE {
		return fmt.Errorf("state %v, want ACTIVE", created.GetSchedule().GetState())
	}
	for i := 0; i < 2; i++ {
		tasks, err := lease(ctx, e, q, 1, 30*time.Second, 10*time.Second)
		if err != nil {
			return err
		}
		if len(tasks) != 1 {
			return fmt.Errorf("no scheduled task within 10s")
		}
		t := tasks[0]
		if string(t.GetPayload()) != "tick" || t.GetMetadata()["taskbroker.schedule_id"] != q {
			return fmt.Errorf("task payload %q metadata %v, want \"tick\" and the schedule id", t.GetPayload(), t.GetMetadata())
		}
		if err := complete(ctx, e, t, nil); err != nil {
			return err
		}
	}
	got, err := e.schedules.GetSchedule(ctx, &pb.GetScheduleRequest{ScheduleId: q})
	if err != nil {
		return fmt.Errorf("GetSchedule: %w", err)
	}
	if got.GetSchedule().GetRuns() < 2 {
		return fmt.Errorf("runs %d, want >= 2", got.GetSchedule().GetRuns())
	}
	if _, err := e.schedules.DeleteSchedule(ctx, &pb.DeleteScheduleRequest{ScheduleId: q}); err != nil {
		return fmt.Errorf("DeleteSchedule: %w", err)
	}
	_, err = e.schedules.GetSchedule(ctx, &pb.GetScheduleRequest{ScheduleId: q})
	if status.Code(err) != codes.NotFound {
		return fmt.Errorf("GetSchedule after delete: %v, want NOT_FOUND", errOrOK(err))
	}
	return nil
}
