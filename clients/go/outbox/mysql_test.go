package outbox_test

// These tests run against a real MySQL or MariaDB at $TASKBROKER_TEST_MYSQL_URL
// (mysql://USER:PASS@HOST:PORT/DB, as scripts/mysql.sh prints; skipped without one
// unless TASKBROKER_REQUIRE_MYSQL is set), each in a database of its own, and end to end
// through `taskbroker relay --once` when a broker ($TASKBROKER_ADDR) and the built binary
// are there.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"go.opentelemetry.io/otel/trace"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	"github.com/taskbroker/taskbroker/clients/go/outbox"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// mysqlDSN is go-sql-driver's form of a mysql:// URL, naming database db.
func mysqlDSN(t *testing.T, raw, db string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net = "tcp"
	cfg.Addr = u.Host
	if u.Port() == "" {
		cfg.Addr = u.Host + ":3306"
	}
	cfg.DBName = db
	return cfg.FormatDSN()
}

// freshMySQL makes a database with the outbox schema (the shipped file) and an orders
// table, and returns its mysql:// URL and a handle on it.
func freshMySQL(t *testing.T) (string, *sql.DB) {
	t.Helper()
	admin := os.Getenv("TASKBROKER_TEST_MYSQL_URL")
	if admin == "" {
		if os.Getenv("TASKBROKER_REQUIRE_MYSQL") != "" {
			t.Fatal("TASKBROKER_TEST_MYSQL_URL is not set but MySQL tests are required")
		}
		t.Skip("TASKBROKER_TEST_MYSQL_URL is not set")
	}
	name := fmt.Sprintf("tb_go_outbox_%d_%d", os.Getpid(), rand.Uint64()>>24)
	server, err := sql.Open("mysql", mysqlDSN(t, admin, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	if _, err := server.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r, err := sql.Open("mysql", mysqlDSN(t, admin, "")); err == nil {
			_, _ = r.Exec("DROP DATABASE IF EXISTS " + name)
			_ = r.Close()
		}
	})
	schema, err := os.ReadFile(filepath.Join(root, "migrations", "outbox", "mysql", "0001_outbox.sql"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", mysqlDSN(t, admin, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(string(schema)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE orders (id bigint PRIMARY KEY, total bigint NOT NULL) ENGINE = InnoDB"); err != nil {
		t.Fatal(err)
	}
	return admin[:strings.LastIndex(admin, "/")] + "/" + name, db
}

func TestMySQLACommittedTransactionLeavesItsRowAndARolledBackOneNone(t *testing.T) {
	_, db := freshMySQL(t)
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders VALUES (1, 100)"); err != nil {
		t.Fatal(err)
	}
	keyed, err := outbox.EnqueueMySQL(ctx, tx, &pb.TaskSpec{Queue: "emails", Payload: []byte("order 1"), Key: "order-1", Priority: 3})
	if err != nil {
		t.Fatal(err)
	}
	unkeyed, err := outbox.EnqueueMySQL(ctx, tx, &pb.TaskSpec{Queue: "emails", Payload: []byte("order 1 again")})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders VALUES (2, 200)"); err != nil {
		t.Fatal(err)
	}
	dropped, err := outbox.EnqueueMySQL(ctx, tx, &pb.TaskSpec{Queue: "emails", Payload: []byte("order 2")})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}

	if keyed.Key != "order-1" || !strings.HasPrefix(unkeyed.Key, outbox.KeyPrefix) ||
		len(unkeyed.Key) != len(outbox.KeyPrefix)+36 || unkeyed.Key == dropped.Key || keyed.ID >= unkeyed.ID {
		t.Fatalf("keyed %+v unkeyed %+v dropped %+v", keyed, unkeyed, dropped)
	}
	got := rows(t, db)
	if len(got) != 2 || got[0].id != keyed.ID || got[0].key != keyed.Key || got[1].id != unkeyed.ID || got[1].key != unkeyed.Key {
		t.Fatalf("rows %+v, want only %+v and %+v", got, keyed, unkeyed)
	}
	if s := got[0].spec; s.GetQueue() != "emails" || string(s.GetPayload()) != "order 1" || s.GetPriority() != 3 || s.GetKey() != "order-1" {
		t.Fatalf("stored spec %v", s)
	}
	if s := got[1].spec; string(s.GetPayload()) != "order 1 again" || s.GetKey() != "" {
		t.Fatalf("stored spec %v", s)
	}
	var orders int
	if err := db.QueryRow("SELECT count(*) FROM orders").Scan(&orders); err != nil || orders != 1 {
		t.Fatalf("orders %d %v", orders, err)
	}
}

func TestMySQLASpecSubmitWouldRefuseIsRefusedAndNothingIsWritten(t *testing.T) {
	_, db := freshMySQL(t)
	for _, c := range refusedSpecs {
		_, err := outbox.EnqueueMySQL(context.Background(), db, c.spec)
		var invalid *outbox.InvalidSpecError
		if !errors.As(err, &invalid) || err.Error() != c.want {
			t.Errorf("spec %v: error %v, want %q", c.spec, err, c.want)
		}
	}
	if _, err := outbox.EnqueueMySQL(context.Background(), db, nil); err == nil {
		t.Error("a nil spec was written")
	}
	if got := rows(t, db); len(got) != 0 {
		t.Fatalf("rows written: %v", got)
	}
}

func TestMySQLTheCallersTraceGoesIntoTheSpec(t *testing.T) {
	_, db := freshMySQL(t)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	if _, err := outbox.EnqueueMySQL(ctx, db, &pb.TaskSpec{Queue: "traced"}); err != nil {
		t.Fatal(err)
	}
	got := rows(t, db)[0].spec.GetMetadata()[taskbroker.TraceParent]
	if want := "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"; got != want {
		t.Fatalf("traceparent %q, want %q", got, want)
	}
}

func TestMySQLTheRelayTurnsCommittedRowsIntoTasks(t *testing.T) {
	addr := os.Getenv("TASKBROKER_ADDR")
	bin := os.Getenv("TASKBROKER_BIN")
	if bin == "" {
		bin = filepath.Join(root, "target", "debug", "taskbroker")
	}
	if _, err := os.Stat(bin); addr == "" || err != nil {
		t.Skip("needs a broker ($TASKBROKER_ADDR) and the built taskbroker binary")
	}
	source, db := freshMySQL(t)
	ctx := context.Background()
	queue := fmt.Sprintf("test.go.outbox.mysql.%d", rand.Uint32())
	tx, _ := db.BeginTx(ctx, nil)
	kept, err := outbox.EnqueueMySQL(ctx, tx, &pb.TaskSpec{Queue: queue, Payload: []byte("kept")})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	tx, _ = db.BeginTx(ctx, nil)
	if _, err := outbox.EnqueueMySQL(ctx, tx, &pb.TaskSpec{Queue: queue, Payload: []byte("rolled back")}); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback()

	out, err := exec.Command(bin, "relay", "--once", "--source", source, "--addr", addr).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("relay: %v %s%s", err, out, exit.Stderr)
		}
		t.Fatalf("relay: %v %s", err, out)
	}
	if !strings.HasPrefix(string(out), "shipped 1 rows") {
		t.Fatalf("relay said %q", out)
	}
	conn, err := taskbroker.NewClient(addr, taskbroker.FromEnv())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := pb.NewAdminServiceClient(conn).ListTasks(ctx, &pb.ListTasksRequest{Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetTasks()) != 1 || resp.GetTasks()[0].GetKey() != kept.Key || string(resp.GetTasks()[0].GetPayload()) != "kept" {
		t.Fatalf("tasks %v, want one with key %s", resp.GetTasks(), kept.Key)
	}
	if got := rows(t, db); len(got) != 0 {
		t.Fatalf("rows left: %v", got)
	}
}
