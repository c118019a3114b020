//! The event horizon on Postgres: the event id below which every event is final.
//!
//! Event ids are `(top-level transaction id << 20) + ordinal` (migration 0010).
//! Transaction ids are server-wide: the snapshot's list of running transactions
//! holds those of every database on the server, and waiting for the oldest of
//! them (`pg_snapshot_xmin`) lets any open transaction anywhere hold the watch
//! back. Only transactions of this database can write its events, so the
//! horizon waits only for them:
//!
//! 1. One statement takes a snapshot S (`xmax`: one past the newest ended
//!    transaction, every id at or above it counting as running; `xip`: the
//!    running ids below it), then looks at `pg_stat_activity` (A) and
//!    `pg_prepared_xacts`. The horizon is `min(xmax, the ids in xip still running
//!    in this database at A, or prepared in it) << 20`.
//! 2. Events are read below it by a later statement, with a snapshot taken after A.
//!
//! Why that never skips an event: an event to come belongs to a transaction with
//! an id at or above `xmax` (its ids lie above the horizon) or to one in xip (a
//! transaction below `xmax` and not in xip had ended at S, and writes no more).
//! One in xip either still runs in this database at A
//! (the horizon stays below its ids), runs in another database (it can never
//! write here), or has ended by A, committed or not: then the read's later
//! snapshot sees its events (or none), so passing it loses nothing. A session's
//! database never changes, and `backend_xid` and the database are shown to every
//! role (not only to the role that owns the session). Every broker replica
//! writing into this database is among the sessions of this database.
//!
//! The horizon never goes back: an id that holds a later horizon below an
//! earlier one would have been running in this database at the earlier look.
//! What still holds it: a transaction that took an id in this database and stays
//! open (a broker's, until the server ends it for idling, see `WRITER_IDLE_LIMIT`;
//! or any other session's, such as a migration or a psql left open).

use sqlx::PgPool;

use super::super::super::StoreResult;
use super::super::sql;

/// The horizon: every event below it is final. Read events below it only in a
/// later statement.
pub(in crate::store::postgres) async fn horizon(pool: &PgPool) -> StoreResult<i64> {
    Ok(sqlx::query_scalar(sql::EVENT_HORIZON)
        .fetch_one(pool)
        .await?)
}
