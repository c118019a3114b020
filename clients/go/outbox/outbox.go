// Package outbox writes tasks into the producer's own Postgres, in the producer's
// transaction, as rows of taskbroker_outbox (migrations/outbox/postgres/).
// `taskbroker relay` ships committed rows to the broker; a rolled-back transaction
// leaves no row, so no task. See docs/outbox.md.
//
// With database/sql (any Postgres driver: pgx's stdlib, lib/pq):
//
//	tx, _ := db.BeginTx(ctx, nil)
//	tx.ExecContext(ctx, "INSERT INTO orders (id, total) VALUES ($1, $2)", 42, 1999)
//	row, err := outbox.Enqueue(ctx, tx, &pb.TaskSpec{Queue: "emails", Payload: body, Key: "order-42"})
//	tx.Commit()
//
// With pgx's native interface, Statement gives the SQL and its arguments:
//
//	query, args, err := outbox.Statement(spec)
//	err = tx.QueryRow(ctx, query, args...).Scan(&row.ID, &row.Key)
package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// Channel is the channel the table's trigger notifies (once per INSERT statement).
const Channel = "taskbroker_outbox"

// KeyPrefix is the prefix of the idempotency key of a row whose spec has no key.
const KeyPrefix = "outbox:"

const maxKeyBytes = 512

const insert = "INSERT INTO taskbroker_outbox (idempotency_key, spec) " +
	"VALUES (coalesce($1::text, 'outbox:' || gen_random_uuid()), $2) " +
	"RETURNING id, idempotency_key"

// Enqueued is one row written to the outbox.
type Enqueued struct {
	// ID is the row's id (its place in the shipping order).
	ID int64
	// Key is the idempotency key the task will have at the broker: the spec's own key,
	// or "outbox:" and a random UUID (`taskbroker list --key KEY` finds the task).
	Key string
}

// InvalidSpecError is a spec that Submit would refuse whatever the broker's
// settings; nothing was written.
type InvalidSpecError struct {
	Field   string
	Message string
}

func (e *InvalidSpecError) Error() string { return e.Field + ": " + e.Message }

// Querier is what Enqueue writes through: *sql.Tx (the point of an outbox), *sql.Conn
// or *sql.DB.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Enqueue writes spec into the outbox through q, in q's transaction. The traceparent of
// ctx's span goes into the spec's metadata (unless it has one), so the task's trace starts
// at the producer.
func Enqueue(ctx context.Context, q Querier, spec *pb.TaskSpec) (Enqueued, error) {
	if spec != nil {
		taskbroker.InjectTrace(ctx, spec)
	}
	query, args, err := Statement(spec)
	if err != nil {
		return Enqueued{}, err
	}
	var row Enqueued
	if err := q.QueryRowContext(ctx, query, args...).Scan(&row.ID, &row.Key); err != nil {
		return Enqueued{}, fmt.Errorf("outbox: insert: %w", err)
	}
	return row, nil
}

// Statement checks spec and returns the INSERT that writes it and its arguments,
// for drivers other than database/sql. The statement returns (id, idempotency_key).
// Call taskbroker.InjectTrace(ctx, spec) first to keep the caller's trace.
func Statement(spec *pb.TaskSpec) (string, []any, error) {
	if err := Check(spec); err != nil {
		return "", nil, err
	}
	body, err := proto.Marshal(spec)
	if err != nil {
		return "", nil, fmt.Errorf("outbox: encode the spec: %w", err)
	}
	var key any // NULL: the row gets outbox:UUID
	if spec.GetKey() != "" {
		key = spec.GetKey()
	}
	return insert, []any{key, body}, nil
}

// Check returns an *InvalidSpecError naming the field when Submit would refuse spec
// whatever the broker's settings (queue name, key).
func Check(spec *pb.TaskSpec) error {
	if spec == nil {
		return errors.New("outbox: nil spec")
	}
	invalid := func(field, msg string) error { return &InvalidSpecError{Field: field, Message: msg} }
	q := spec.GetQueue()
	switch {
	case q == "":
		return invalid("queue", "is required")
	case len(q) > 128:
		return invalid("queue", "is longer than 128 characters")
	case strings.IndexFunc(q, func(r rune) bool { return !queueRune(r) }) >= 0:
		return invalid("queue", "may only contain A-Z a-z 0-9 . _ : -")
	}
	k := spec.GetKey()
	if len(k) > maxKeyBytes {
		return invalid("key", "is longer than 512 characters")
	}
	if strings.IndexFunc(k, func(r rune) bool { return r < 0x20 || (r >= 0x7f && r <= 0x9f) }) >= 0 {
		return invalid("key", "must not contain control characters")
	}
	// The relay submits rows of many transactions together, each under an
	// idempotency key (docs/outbox.md): an index into the request, or more than
	// one fan-out copy, cannot be shipped.
	if len(spec.GetDependsOnIndex()) > 0 {
		return invalid("depends_on_index", "cannot be used through the outbox (rows of many transactions "+
			"share one Submit); name dependencies by task id in depends_on")
	}
	if spec.GetFanout().GetCopies() > 1 {
		return invalid("fanout.copies", "cannot have more than one copy through the outbox (every row is "+
			"submitted under an idempotency key, which Submit refuses with fan-out)")
	}
	return nil
}

func queueRune(r rune) bool {
	return (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') ||
		r == '.' || r == '_' || r == ':' || r == '-'
}
