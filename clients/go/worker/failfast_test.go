package worker_test

// FailFast against real ports: a TLS server, an HTTP/1 server, the broker spoken to over TLS
// while it is plaintext, and the broker's own HTTP port (TASKBROKER_HTTP_ADDR, given to the
// fault scenario).

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

// countingConn counts Lease calls and signals the third.
type countingConn struct {
	grpc.ClientConnInterface
	leases atomic.Int32
	third  chan struct{}
}

func (c *countingConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if strings.HasSuffix(method, "/Lease") && c.leases.Add(1) == 3 {
		close(c.third)
	}
	return c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
}

// runFailFast runs a FailFast worker on conn and returns Run's error, failing after 20 s.
func runFailFast(t *testing.T, conn grpc.ClientConnInterface) error {
	t.Helper()
	w, err := worker.New(conn, worker.Config{Queues: []string{"failfast"}, WorkerID: "test-go", FailFast: true,
		Logger: (&records{}).logger()},
		func(context.Context, *worker.Task) ([]byte, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = w.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Run returned %v only when its context ended, want at once", err)
	}
	var stopped *worker.StoppedError
	if !errors.As(err, &stopped) {
		t.Fatalf("Run returned %v, want a *worker.StoppedError", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("the error is not one line: %q", err)
	}
	return err
}

func dial(t *testing.T, addr string, opts ...taskbroker.Option) *grpc.ClientConn {
	t.Helper()
	conn, err := taskbroker.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestFailFastStopsAPlaintextWorkerAtATLSPort(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	err := runFailFast(t, dial(t, srv.Listener.Addr().String()))
	if !strings.Contains(err.Error(), "does not speak gRPC over plaintext HTTP/2") {
		t.Errorf("Run returned %q, want it to say the port is not plaintext gRPC", err)
	}
}

func TestFailFastStopsOnAnUntrustedCertificate(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.EnableHTTP2 = true // so the handshake gets as far as the certificate
	srv.StartTLS()
	defer srv.Close()
	err := runFailFast(t, dial(t, srv.Listener.Addr().String(), taskbroker.WithTLS(nil)))
	if !strings.Contains(err.Error(), "TLS handshake failed") || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Run returned %q, want it to say the TLS handshake failed on the certificate", err)
	}
}

func TestFailFastStopsATLSWorkerAtAPlaintextBroker(t *testing.T) {
	f := newFixture(t)
	if os.Getenv("TASKBROKER_CA") != "" {
		t.Skip("the broker serves TLS here")
	}
	err := runFailFast(t, dial(t, os.Getenv("TASKBROKER_ADDR"), taskbroker.WithTLS(&tls.Config{MinVersion: tls.VersionTLS12})))
	if !strings.Contains(err.Error(), "TLS is on but the broker's port is plaintext") {
		t.Errorf("Run returned %q, want it to say the port is plaintext", err)
	}
	_ = f
}

func TestFailFastStopsAtAnHTTP1Server(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	err := runFailFast(t, dial(t, srv.Listener.Addr().String()))
	if !strings.Contains(err.Error(), "does not speak gRPC") {
		t.Errorf("Run returned %q, want it to say the port is not gRPC", err)
	}
}

func TestFailFastStopsAtTheBrokersHTTPPort(t *testing.T) {
	addr := os.Getenv("TASKBROKER_HTTP_ADDR")
	if addr == "" {
		t.Skip("TASKBROKER_HTTP_ADDR is not set (the fault scenario sets it)")
	}
	runFailFast(t, dial(t, addr, taskbroker.FromEnv()))
}

// Without FailFast, a TLS port is retried like any outage until Run's context ends.
func TestWithoutFailFastATLSPortIsRetried(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	conn := &countingConn{ClientConnInterface: dial(t, srv.Listener.Addr().String()), third: make(chan struct{})}
	w, err := worker.New(conn, worker.Config{Queues: []string{"failfast"}, WorkerID: "test-go",
		Logger: (&records{}).logger()},
		func(context.Context, *worker.Task) ([]byte, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-conn.third:
	case err := <-done:
		t.Fatalf("Run returned %v before the third Lease try", err)
	case <-time.After(20 * time.Second):
		t.Fatal("no third Lease try within 20 s")
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while retrying", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v after its context ended, want nil", err)
	}
}
