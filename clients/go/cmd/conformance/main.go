// Command conformance runs clients/conformance/SCENARIO.md against the broker at
// $TASKBROKER_ADDR and prints one PASS/FAIL line per case, then "N passed, M failed".
package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"google.golang.org/grpc"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

const workerID = "conf-go"

// env is what every case gets: the service clients.
type env struct {
	conn      *grpc.ClientConn
	broker    pb.BrokerServiceClient
	admin     pb.AdminServiceClient
	schedules pb.ScheduleServiceClient
}

type testCase struct {
	name string
	run  func(ctx context.Context, e *env, queue string) error
}

var cases = []testCase{
	{"lease_order", leaseOrder},
	{"idempotent_submit", idempotentSubmit},
	{"heartbeat_extends", heartbeatExtends},
	{"checkpoint_handover", checkpointHandover},
	{"retryable_fail", retryableFail},
	{"non_retryable_fail", nonRetryableFail},
	{"stale_token", staleToken},
	{"complete_result", completeResult},
	{"cancel_running", cancelRunning},
	{"bad_input", badInput},
	{"spec_defaults", specDefaults},
	{"lease_lost_reason", leaseLostReason},
	{"checkpoint_extends", checkpointExtends},
	{"deadline_cancels", deadlineCancels},
	{"stop_codes", stopCodes},
	{"drain_on_sigterm", drainOnSigterm},
	{"trace_propagation", traceContextPropagates},
	{"schedule_every", scheduleEvery},
	{"targeted_task", targetedTask},
	{"sticky_retry", stickyRetry},
	{"dependency", dependency},
	{"wait_by_stream", waitByStream},
	{"lease_next", leaseNext},
	{"worker_id_binding", workerIDBinding},
	{"typed_handlers", typedHandlers},
	{"dependency_results", dependencyResults},
	{"keys_and_replace", keysAndReplace},
	{"submit_backpressure", submitBackpressure},
	{"dead_result", deadResult},
}

func main() {
	addr := os.Getenv("TASKBROKER_ADDR")
	if addr == "" {
		fmt.Fprintln(os.Stderr, "TASKBROKER_ADDR is not set (host:port)")
		os.Exit(2)
	}
	// TLS, mTLS and the token come from TASKBROKER_CA / _CLIENT_CERT / _CLIENT_KEY / _TOKEN.
	conn, err := taskbroker.NewClient(addr, taskbroker.FromEnv())
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		os.Exit(2)
	}
	defer conn.Close()
	e := &env{
		conn:      conn,
		broker:    pb.NewBrokerServiceClient(conn),
		admin:     pb.NewAdminServiceClient(conn),
		schedules: pb.NewScheduleServiceClient(conn),
	}

	passed, failed := 0, 0
	for _, c := range cases {
		// Generous per case: the longest waits are a 15 s long poll plus a lease expiry.
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := c.run(ctx, e, queueName(c.name))
		cancel()
		if err != nil {
			failed++
			fmt.Printf("FAIL %s: %v\n", c.name, err)
		} else {
			passed++
			fmt.Printf("PASS %s\n", c.name)
		}
	}
	fmt.Printf("%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		os.Exit(1)
	}
}

// queueName gives each case its own queue, conf.go.<case>.<random>.
func queueName(name string) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 6)
	for i := range b {
		b[i] = letters[rand.IntN(len(letters))]
	}
	return fmt.Sprintf("conf.go.%s.%s", name, b)
}
