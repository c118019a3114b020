//! The event horizon on Postgres: the event id below which every event is final.
//!
//! Event ids are `(top-level transaction id << 20) + ordinal` (migration 0010).
//! A reader's snapshot lists the transactions still running (`xip`) and the next
//! id to be handed out (`xmax`). An event to come belongs to one of those running
//! transactions or to a later one, so reading below `min(running ids, xmax) << 20`
//! never passes an event that commits later.
//!
//! Transaction ids are cluster-wide, so the running list holds the transactions
//! of every database of the server. A transaction whose session is connected to
//! another database (or a prepared transaction of another database) can never
//! write this database's `task_events`, so it is left out: only transactions of
//! this database hold the horizon (every broker replica's writers among them).
//! The test is conservative: a running id is left out only when
//! `pg_stat_activity` (or `pg_prepared_xacts`) shows it belongs elsewhere; one
//! that ended between the snapshot and that look (its events invisible to the
//! snapshot, maybe committed) still holds this one read back.

use sqlx::PgPool;

use super::super::StoreResult;

/// The horizon, as an SQL expression evaluated once per statement, with the
/// statement's own snapshot (so the events a read returns are judged by the same
/// snapshot that decides which transactions still run).
pub(super) const HORIZON: &str = "(SELECT LEAST(pg_snapshot_xmax(c.s)::text::bigint, \
       (SELECT min(x::text::bigint) FROM pg_snapshot_xip(c.s) AS x \
        WHERE x::xid NOT IN ( \
          SELECT backend_xid FROM pg_stat_activity \
          WHERE backend_xid IS NOT NULL AND datname IS DISTINCT FROM current_database() \
          UNION ALL \
          SELECT transaction FROM pg_prepared_xacts WHERE database <> current_database()))) \
     << 20 FROM (SELECT pg_current_snapshot() AS s) c)";

/// The largest event id any transaction begun so far can write: ids of running
/// transactions are below `xmax << 20`.
pub(super) async fn event_ceiling(pool: &PgPool) -> StoreResult<i64> {
    Ok(sqlx::query_scalar(
        "SELECT (pg_snapshot_xmax(pg_current_snapshot())::text::bigint << 20) - 1",
    )
    .fetch_one(pool)
    .await?)
}

/// The time (ms) of the oldest committed event that is not final yet (a writer
/// of this database that started earlier still runs), if any.
pub(super) async fn event_held_since(pool: &PgPool) -> StoreResult<Option<i64>> {
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT time FROM task_events WHERE event_id >= {HORIZON} ORDER BY event_id LIMIT 1"
    )))
    .fetch_optional(pool)
    .await?)
}
