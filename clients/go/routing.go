package taskbroker

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// Routing: builders for the TaskSpec fields that say who may lease a task
// (Target), how its retries stay on one worker (Sticky) and how many copies Submit makes
// (Fanout). Workers say what they are with worker.Config.Labels.
//
//	spec := &pb.TaskSpec{Queue: "render", Payload: frame,
//		Target: taskbroker.TargetLabels(map[string]string{"gpu": "a100"}),
//		Sticky: taskbroker.SoftSticky(time.Minute)}
//	res, _ := broker.Submit(ctx, &pb.SubmitRequest{Tasks: []*pb.TaskSpec{spec}})
//	res.GetResults()[0].GetCopyTaskIds() // with Fanout: every copy, the first being TaskId

// TargetWorker: only the worker with this id may lease the task.
func TargetWorker(workerID string) *pb.Target { return &pb.Target{WorkerId: workerID} }

// TargetLabels: only a worker whose labels include every pair may lease the task. No such
// worker is not an error: the task waits.
func TargetLabels(labels map[string]string) *pb.Target { return &pb.Target{Labels: labels} }

// SoftSticky reserves a retry for the worker that ran the failed attempt until timeout passes
// (1 s to 24 h; 0 means the broker's default, 30 s), then lets any worker take it.
func SoftSticky(timeout time.Duration) *pb.StickyPolicy {
	p := &pb.StickyPolicy{Strategy: pb.StickyStrategy_STICKY_STRATEGY_SOFT}
	if timeout > 0 {
		p.Timeout = durationpb.New(timeout)
	}
	return p
}

// HardSticky reserves a retry for the worker that ran the failed attempt until the task's
// deadline or an admin requeue.
func HardSticky() *pb.StickyPolicy {
	return &pb.StickyPolicy{Strategy: pb.StickyStrategy_STICKY_STRATEGY_HARD}
}

// Fanout makes Submit create copies tasks (1 to 1000) sharing a fan-out group; with
// distinctWorkers no worker gets two copies of the group.
func Fanout(copies uint32, distinctWorkers bool) *pb.Fanout {
	return &pb.Fanout{Copies: copies, DistinctWorkers: distinctWorkers}
}
