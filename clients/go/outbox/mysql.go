package outbox

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

const insertMySQL = "INSERT INTO taskbroker_outbox (idempotency_key, spec) VALUES (?, ?)"

// Execer is what EnqueueMySQL writes through: *sql.Tx (the point of an outbox),
// *sql.Conn or *sql.DB.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// EnqueueMySQL writes spec into a MySQL 8.0.13+ or MariaDB 10.6+ outbox
// (migrations/outbox/mysql/) through q, in q's transaction; any database/sql MySQL
// driver (go-sql-driver/mysql). The checks and the trace context are those of Enqueue.
// MySQL has no RETURNING: a spec without a key gets "outbox:" and a random UUID here,
// and the row's id is the statement's LastInsertId.
//
//	tx, _ := db.BeginTx(ctx, nil)
//	tx.ExecContext(ctx, "INSERT INTO orders (id, total) VALUES (?, ?)", 42, 1999)
//	row, err := outbox.EnqueueMySQL(ctx, tx, &pb.TaskSpec{Queue: "emails", Payload: body})
//	tx.Commit()
func EnqueueMySQL(ctx context.Context, q Execer, spec *pb.TaskSpec) (Enqueued, error) {
	if err := Check(spec); err != nil {
		return Enqueued{}, err
	}
	taskbroker.InjectTrace(ctx, spec)
	body, err := proto.Marshal(spec)
	if err != nil {
		return Enqueued{}, fmt.Errorf("outbox: encode the spec: %w", err)
	}
	key := spec.GetKey()
	if key == "" {
		key = KeyPrefix + uuid.NewString()
	}
	res, err := q.ExecContext(ctx, insertMySQL, key, body)
	if err != nil {
		return Enqueued{}, fmt.Errorf("outbox: insert: %w", err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return Enqueued{}, fmt.Errorf("outbox: the row's id: %w", err)
	}
	return Enqueued{ID: id, Key: key}, nil
}
