//! Flow: recording task events on Postgres, in the transaction of the
//! statement that makes each transition, and reading the event log.
//!
//! A statement's events are one row of `task_event_batches` (migration 0018):
//! parallel arrays in event order, event i (from 1) with id `first_id + i - 1`.
//! The hot statements (insert, lease, gated lease, complete) carry a
//! data-modifying CTE (`${event_batch} SELECT ... FROM <updated rows>
//! ${event_batch_end}`, events.sql), so the events of a batch of tasks cost one
//! row; the rarer paths (fail, reclaim, checkpoint, admin operations) send
//! theirs with [`record`] in the same transaction. Ids are `(xid << 20) +
//! ordinal` (migration 0010): `${event_base}` is the next free ordinal of the
//! running transaction, one index probe.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::super::events::event_list_of;
use super::super::events::{EventRow, event_record};
use super::super::flow::Ev;
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
        event_list_of(&self.pool, sql::EVENT_LIST, task_id, after_event_id, limit).await
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

/// The rows a statement ending in `${event_batch_end}` changed, from its answer
/// (the event count of its one row, none when it changed none).
pub(super) fn changed(n: Option<i32>) -> u64 {
    n.map_or(0, |n| u64::try_from(n).unwrap_or(0))
}
