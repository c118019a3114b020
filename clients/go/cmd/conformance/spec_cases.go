package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

const (
	traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	traceParent = "00-" + traceID + "-00f067aa0ba902b7-01"
)

var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

func newWorker(e *env, q string, cfg worker.Config, h worker.Handler) (*worker.Worker, error) {
	cfg.Queues = []string{q}
	cfg.WorkerID = workerID
	if cfg.PollWait == 0 {
		cfg.PollWait = time.Second
	}
	cfg.Logger = quiet
	return worker.New(e.conn, cfg, h)
}

func submit(ctx context.Context, e *env, spec *pb.TaskSpec) (string, error) {
	resp, err := e.broker.Submit(ctx, &pb.SubmitRequest{Tasks: []*pb.TaskSpec{spec}})
	if err != nil {
		return "", fmt.Errorf("Submit: %w", err)
	}
	return resp.GetResults()[0].GetTaskId(), nil
}
