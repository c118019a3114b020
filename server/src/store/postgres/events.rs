//! Flow: recording task events on Postgres, in the transaction of the
//! statement that makes each transition.
//!
//! The hot statements (insert, lease, gated lease, complete) append a
//! data-modifying CTE (`INSERT INTO task_events ... SELECT ... FROM <updated
//! rows>`), so an event costs no round trip and no function call per row; the
//! rarer paths (fail, reclaim, checkpoint, admin operations) send their events
//! with [`record`] in the same transaction. Ids are `(xid << 20) + ordinal`
//! (migration 0010): [`event_base!`] is the next free ordinal of the running
//! transaction, one index probe per statement.

use sqlx::PgConnection;

use super::super::StoreResult;
use super::super::flow::Ev;

/// The first free event id of the running transaction: an uncorrelated
/// sub-select, evaluated once per statement (one backward probe of the primary
/// key within the transaction's id range).
macro_rules! event_base {
    () => {
        "(SELECT COALESCE(max(event_id) + 1, pg_current_xact_id()::text::bigint << 20) \
         FROM task_events WHERE event_id >= pg_current_xact_id()::text::bigint << 20 \
         AND event_id < (pg_current_xact_id()::text::bigint + 1) << 20)"
    };
}
pub(super) use event_base;

/// The column list of an event insert.
macro_rules! event_insert {
    () => {
        "INSERT INTO task_events (event_id, task_id, queue, kind, state, attempt, worker_id, \
         time, detail) "
    };
}
pub(super) use event_insert;

/// Records events (in order) in the transaction `conn` is in.
pub(super) async fn record(conn: &mut PgConnection, evs: &[Ev<'_>]) -> StoreResult<()> {
    if evs.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = evs.iter().map(|e| e.task_id).collect();
    let queues: Vec<&str> = evs.iter().map(|e| e.queue).collect();
    let kinds: Vec<&str> = evs.iter().map(|e| e.kind.as_str()).collect();
    let states: Vec<&str> = evs.iter().map(|e| e.state).collect();
    let attempts: Vec<i64> = evs.iter().map(|e| e.attempt).collect();
    let workers: Vec<Option<&str>> = evs.iter().map(|e| e.worker).collect();
    let times: Vec<i64> = evs.iter().map(|e| e.time).collect();
    let details: Vec<Option<&str>> = evs.iter().map(|e| e.detail).collect();
    sqlx::query(concat!(
        event_insert!(),
        "SELECT ",
        event_base!(),
        " + o - 1, t, q, k, s, a, w, at, d \
         FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], \
           $7::bigint[], $8::text[]) WITH ORDINALITY AS e(t, q, k, s, a, w, at, d, o)"
    ))
    .bind(&ids)
    .bind(&queues)
    .bind(&kinds)
    .bind(&states)
    .bind(&attempts)
    .bind(&workers)
    .bind(&times)
    .bind(&details)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The statement tail that records one `kind` event per row of the CTE `u`
/// (which returns `id, queue, state, attempt, run_at`), at `time` (an SQL expression
/// in ms): `WITH u AS (UPDATE ... RETURNING ...) <this>`. Its row count is the
/// number of rows `u` changed.
pub(super) fn from_updated(kind: &str, time: &str) -> String {
    from_updated_with(kind, time, "NULL")
}

/// As [`from_updated`], with `detail` (an SQL expression).
pub(super) fn from_updated_with(kind: &str, time: &str, detail: &str) -> String {
    format!(
        "{} SELECT {} + row_number() OVER () - 1, id, queue, '{kind}', \
         CASE WHEN state = 'pending' AND run_at > {time} THEN 'scheduled' \
              WHEN state = 'pending' THEN 'ready' ELSE state END, \
         attempt, NULL, {time}, {detail} FROM u",
        event_insert!(),
        event_base!()
    )
}
