//! Flow: recording task events on Postgres, in the transaction of the
//! statement that makes each transition, and reading the event log.
//!
//! A statement's events are one row of `task_event_batches` (migration 0018):
//! parallel arrays in event order, event i (from 1) with id `first_id + i - 1`.
//! The hot statements (insert, lease, gated lease, complete) carry a
//! data-modifying CTE (`${event_batch} SELECT ... FROM <updated rows>
//! ${event_batch_end}`, tx.sql), so the events of a batch of tasks cost one
//! row; the rarer paths (fail, reclaim, checkpoint, admin operations) send
//! theirs with [`record`] in the same transaction. Ids are `(xid << 20) +
//! ordinal` (migration 0010): `${event_base}` is the next free ordinal of the
//! running transaction, one index probe.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::super::flow::{Ev, EventRow, event_record};
use super::super::row::ms;
use super::super::*;
use super::native::horizon::horizon;
use super::{PostgresStore, sql};

#[async_trait]
impl Events for PostgresStore {
    async fn event_list(
        &self,
        task_id: &str,
        after_event_id: i64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>> {
        let rows: Vec<EventRow> = sqlx::query_as(sql::EVENT_LIST)
            .bind(task_id)
            .bind(after_event_id)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(event_record).collect()
    }

    async fn event_read(&self, after_event_id: i64, limit: u32) -> StoreResult<Vec<EventRecord>> {
        // The horizon first, in a statement of its own (native/horizon.rs).
        let below = horizon(&self.pool).await?;
        let rows: Vec<EventRow> = sqlx::query_as(sql::EVENT_READ)
            .bind(after_event_id)
            .bind(i64::from(limit))
            .bind(below)
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(event_record).collect()
    }

    async fn event_head(&self) -> StoreResult<i64> {
        Ok(horizon(&self.pool).await? - 1)
    }

    /// (A transaction still running may lie above it; nobody has seen its
    /// events yet.)
    async fn event_ceiling(&self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(sql::EVENT_CEILING)
            .fetch_one(&self.pool)
            .await?)
    }

    /// The time (ms) of the oldest committed event that is not final yet (a
    /// writer of this database that started earlier still runs), if any.
    async fn event_held_since(&self) -> StoreResult<Option<i64>> {
        let h = horizon(&self.pool).await?;
        Ok(sqlx::query_scalar(sql::EVENT_HELD_SINCE)
            .bind(h)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn event_purge(&self, before: DateTime<Utc>, limit: u32) -> StoreResult<u64> {
        let n: Option<i64> = sqlx::query_scalar(sql::EVENT_PURGE)
            .bind(ms(before))
            .bind(i64::from(limit))
            .fetch_one(&self.pool)
            .await?;
        Ok(n.map_or(0, |n| u64::try_from(n).unwrap_or(0)))
    }
}

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
    // The arrays as given: one row, in the given order.
    sqlx::query(sql::EVENT_RECORD)
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



/// The first free event id of the running transaction: an uncorrelated
/// sub-select, evaluated once per statement (one backward probe of the
/// `last_id` index within the transaction's id range).
macro_rules! event_base {
    () => {
        "(SELECT COALESCE(max(last_id) + 1, pg_current_xact_id()::text::bigint << 20) \
         FROM task_event_batches WHERE last_id >= pg_current_xact_id()::text::bigint << 20 \
         AND last_id < (pg_current_xact_id()::text::bigint + 1) << 20)"
    };
}
pub(super) use event_base;

/// The start of an event insert: `event_batch!() "SELECT <task id>, <queue>,
/// <kind>, <state>, <attempt>, <worker>, <time>, <detail> FROM ..."
/// event_batch_end!()` records the sub-select's rows, in their order, as one
/// row (none when it has no rows). The statement returns that row's event count.
macro_rules! event_batch {
    () => {
        concat!(
            "INSERT INTO task_event_batches (first_id, last_id, task_ids, queues, kinds, \
             states, attempts, workers, times, details) SELECT ",
            $crate::store::postgres::events::event_base!(),
            ", ",
            $crate::store::postgres::events::event_base!(),
            " + count(*) - 1, array_agg(e.t), array_agg(e.q), array_agg(e.k), array_agg(e.s), \
             array_agg(e.a), array_agg(e.w), array_agg(e.at), array_agg(e.d) FROM ("
        )
    };
}
pub(super) use event_batch;

/// The end of [`event_batch!`].
macro_rules! event_batch_end {
    () => {
        ") AS e(t, q, k, s, a, w, at, d) HAVING count(*) > 0 RETURNING cardinality(task_ids)"
    };
}
pub(super) use event_batch_end;


/// The rows a statement ending in [`from_updated`] changed, from its answer.
pub(super) fn changed(n: Option<i32>) -> u64 {
    n.map_or(0, |n| u64::try_from(n).unwrap_or(0))
}
