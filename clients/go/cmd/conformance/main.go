// Command conformance runs clients/conformance/SCENARIO.md (its cases from
// clients/conformance/cases/, see registry) against the broker at
// $TASKBROKER_ADDR and prints one PASS/FAIL line per case, then "N passed, M failed".
package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
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

// registry holds the cases by name: each case.go of clients/conformance/cases/NN-<name>/ is
// linked into this package by clients/go/conformance.sh and registers itself from init.
var registry = map[string]func(ctx context.Context, e *env, queue string) error{}

func register(name string, run func(ctx context.Context, e *env, queue string) error) {
	registry[name] = run
}

// casesFile lists the cases in run order, one name a line (relative to clients/go, where
// conformance.sh runs the scenario).
const casesFile = "../conformance/cases.txt"

// loadCases gives the cases of casesFile in its order; a case with no registered code (its
// case.go missing or not linked) is an error naming it.
func loadCases() ([]testCase, error) {
	data, err := os.ReadFile(casesFile)
	if err != nil {
		return nil, err
	}
	var cases []testCase
	var missing []string
	for _, name := range strings.Fields(string(data)) {
		run, ok := registry[name]
		if !ok {
			missing = append(missing, name)
			continue
		}
		cases = append(cases, testCase{name, run})
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("no case.go linked for %s (clients/go/conformance.sh links them)", strings.Join(missing, ", "))
	}
	return cases, nil
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

	cases, err := loadCases()
	if err != nil {
		fmt.Println("FAIL load cases:", err)
		fmt.Println("0 passed, 1 failed")
		os.Exit(1)
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
