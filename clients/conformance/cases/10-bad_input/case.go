// The conformance case bad_input, for the Go client: README.md beside this file says what it does
// and expects. clients/go/conformance.sh links it into cmd/conformance, whose package it belongs
// to.

package main

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

func init() { register("bad_input", badInput) }

func badInput(ctx context.Context, e *env, _ string) error {
	_, err := e.broker.Submit(ctx, &pb.SubmitRequest{Tasks: []*pb.TaskSpec{{Queue: "has space"}}})
	if status.Code(err) != codes.InvalidArgument {
		return fmt.Errorf("Submit queue \"has space\": %v, want INVALID_ARGUMENT", errOrOK(err))
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "tasks[0].queue") {
		return fmt.Errorf("INVALID_ARGUMENT message %q does not name tasks[0].queue", msg)
	}
	return nil
}
