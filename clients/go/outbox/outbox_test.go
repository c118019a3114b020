package outbox_test

// These tests run against a real Postgres at $TASKBROKER_TEST_POSTGRES_URL (as
// scripts/test.sh exports; skipped without one unless TASKBROKER_REQUIRE_POSTGRES is
// set), each in a database of its own, and end to end through `taskbroker relay --once`
// when a broker ($TASKBROKER_ADDR) and the built binary are there.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	"github.com/taskbroker/taskbroker/clients/go/outbox"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

var root = filepath.Join("..", "..", "..")

// freshDB makes a database with the outbox schema (the shipped file) and an orders table.
func freshDB(t *testing.T) string {
	t.Helper()
	admin := os.Getenv("TASKBROKER_TEST_POSTGRES_URL")
	if admin == "" {
		if os.Getenv("TASKBROKER_REQUIRE_POSTGRES") != "" {
			t.Fatal("TASKBROKER_TEST_POSTGRES_URL is not set but Postgres tests are required")
		}
		t.Skip("TASKBROKER_TEST_POSTGRES_URL is not set")
	}
	ctx := context.Background()
	name := fmt.Sprintf("tb_go_outbox_%d_%d", os.Getpid(), rand.Uint64()>>16)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), admin)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = c.Close(context.Background())
		}
	})
	url := admin[:strings.LastIndex(admin, "/")] + "/" + name
	schema, err := os.ReadFile(filepath.Join(root, "migrations", "outbox", "postgres", "0001_outbox.sql"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	// The simple protocol runs the file's several statements in one call.
	if _, err := db.Exec(ctx, string(schema), pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, "CREATE TABLE orders (id bigint PRIMARY KEY, total bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return url
}

type row struct {
	id   int64
	key  string
	spec *pb.TaskSpec
}

func rows(t *testing.T, db *sql.DB) []row {
	t.Helper()
	rs, err := db.Query("SELECT id, idempotency_key, spec FROM taskbroker_outbox ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var r row
		var body []byte
		if err := rs.Scan(&r.id, &r.key, &body); err != nil {
			t.Fatal(err)
		}
		r.spec = &pb.TaskSpec{}
		if err := proto.Unmarshal(body, r.spec); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func open(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", freshDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestACommittedTransactionLeavesItsRowAndARolledBackOneNone(t *testing.T) {
	db := open(t)
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders VALUES (1, 100)"); err != nil {
		t.Fatal(err)
	}
	kept, err := outbox.Enqueue(ctx, tx, &pb.TaskSpec{Queue: "emails", Payload: []byte("order 1"), Priority: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	tx, _ = db.BeginTx(ctx, nil)
	if _, err := outbox.Enqueue(ctx, tx, &pb.TaskSpec{Queue: "emails", Payload: []byte("order 2")}); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback()

	got := rows(t, db)
	if len(got) != 1 || got[0].id != kept.ID || got[0].key != kept.Key {
		t.Fatalf("rows %+v, want only %+v", got, kept)
	}
	if !strings.HasPrefix(kept.Key, outbox.KeyPrefix) {
		t.Fatalf("key %q", kept.Key)
	}
	if s := got[0].spec; s.GetQueue() != "emails" || string(s.GetPayload()) != "order 1" || s.GetPriority() != 3 || s.GetKey() != "" {
		t.Fatalf("stored spec %v", s)
	}
}

func TestASpecKeyIsTheRowsKeyAndPgxNativeWritesThroughStatement(t *testing.T) {
	url := freshDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var a, b outbox.Enqueued
	for i, spec := range []*pb.TaskSpec{{Queue: "emails", Key: "order-7"}, {Queue: "emails"}} {
		query, args, err := outbox.Statement(spec)
		if err != nil {
			t.Fatal(err)
		}
		dst := []*outbox.Enqueued{&a, &b}[i]
		if err := tx.QueryRow(ctx, query, args...).Scan(&dst.ID, &dst.Key); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Key != "order-7" || !strings.HasPrefix(b.Key, outbox.KeyPrefix) || a.ID >= b.ID {
		t.Fatalf("a %+v b %+v", a, b)
	}
}

// refusedSpecs are specs Submit would refuse whatever the broker's settings, and the
// error of each.
var refusedSpecs = []struct {
	spec *pb.TaskSpec
	want string
}{
	{&pb.TaskSpec{}, "queue: is required"},
	{&pb.TaskSpec{Queue: "has space"}, "queue: may only contain A-Z a-z 0-9 . _ : -"},
	{&pb.TaskSpec{Queue: strings.Repeat("q", 129)}, "queue: is longer than 128 characters"},
	{&pb.TaskSpec{Queue: "q", Key: strings.Repeat("k", 513)}, "key: is longer than 512 characters"},
	{&pb.TaskSpec{Queue: "q", Key: "a\nb"}, "key: must not contain control characters"},
	{&pb.TaskSpec{Queue: "q", DependsOnIndex: []uint32{0}}, "depends_on_index: cannot be used through the outbox " +
		"(rows of many transactions share one Submit); name dependencies by task id in depends_on"},
	{&pb.TaskSpec{Queue: "q", Fanout: &pb.Fanout{Copies: 2}}, "fanout.copies: cannot have more than one copy " +
		"through the outbox (every row is submitted under an idempotency key, which Submit refuses with fan-out)"},
}

func TestASpecSubmitWouldRefuseIsRefusedAndNothingIsWritten(t *testing.T) {
	db := open(t)
	for _, c := range refusedSpecs {
		_, err := outbox.Enqueue(context.Background(), db, c.spec)
		var invalid *outbox.InvalidSpecError
		if !errors.As(err, &invalid) || err.Error() != c.want {
			t.Errorf("spec %v: error %v, want %q", c.spec, err, c.want)
		}
	}
	if got := rows(t, db); len(got) != 0 {
		t.Fatalf("rows written: %v", got)
	}
}

func TestTheRelayTurnsCommittedRowsIntoTasks(t *testing.T) {
	addr := os.Getenv("TASKBROKER_ADDR")
	bin := os.Getenv("TASKBROKER_BIN")
	if bin == "" {
		bin = filepath.Join(root, "target", "debug", "taskbroker")
	}
	if _, err := os.Stat(bin); addr == "" || err != nil {
		t.Skip("needs a broker ($TASKBROKER_ADDR) and the built taskbroker binary")
	}
	url := freshDB(t)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	queue := fmt.Sprintf("test.go.outbox.%d", rand.Uint32())
	tx, _ := db.BeginTx(ctx, nil)
	kept, err := outbox.Enqueue(ctx, tx, &pb.TaskSpec{Queue: queue, Payload: []byte("kept")})
	if err != nil {
		t.Fatal(err)
	}
	_ = tx.Commit()
	tx, _ = db.BeginTx(ctx, nil)
	if _, err := outbox.Enqueue(ctx, tx, &pb.TaskSpec{Queue: queue, Payload: []byte("rolled back")}); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback()

	out, err := exec.Command(bin, "relay", "--once", "--source", url, "--addr", addr).Output()
	if err != nil {
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

func TestTheCallersTraceGoesIntoTheSpec(t *testing.T) {
	db := open(t)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	if _, err := outbox.Enqueue(ctx, db, &pb.TaskSpec{Queue: "traced"}); err != nil {
		t.Fatal(err)
	}
	got := rows(t, db)[0].spec.GetMetadata()[taskbroker.TraceParent]
	if want := "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"; got != want {
		t.Fatalf("traceparent %q, want %q", got, want)
	}
}
