//! How a write runs on Postgres, and how it records its events.
//!
//! A write is one transaction on the pool: `begin`, the statements, `commit`
//! (no retry: row locks and `FOR UPDATE SKIP LOCKED` order concurrent writers,
//! and a statement that fails ends the call with its error). Every write
//! method of the store runs its statements in such a transaction; there is no
//! other way to write.
//!
//! The events of its transitions are written in the same transaction, by the
//! statement itself where it is a hot one (a CTE built from the fragments of
//! events.sql: `${event_batch} SELECT ... ${event_batch_end}`, or
//! `${leased_event}` for a lease), else by [`super::events::record`] after it,
//! so they commit or roll back with the write. A change that makes tasks
//! pending sends `NOTIFY` ([`PostgresStore::notify`]), delivered at commit.

use sqlx::{Postgres, Transaction};

use super::super::flow::of_row as flow_of_row;
use super::super::row::IntoRecord;
use super::super::*;
use super::{CHANNEL, PostgresStore, events, sql};
use crate::domain::event::EventKind;

impl PostgresStore {
    /// Wakes the long-polls of `queues` on every replica when the transaction commits.
    pub(super) async fn notify(
        tx: &mut Transaction<'_, Postgres>,
        queues: &[&str],
    ) -> StoreResult<()> {
        if queues.is_empty() {
            return Ok(());
        }
        sqlx::query(sql::QUEUE_NOTIFY)
            .bind(CHANNEL)
            .bind(queues)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// The task as it is after a change, which is recorded as a `kind` event (Flow).
    pub(super) async fn changed_event(
        tx: &mut Transaction<'_, Postgres>,
        id: &str,
        kind: EventKind,
        now: i64,
        detail: Option<&str>,
    ) -> StoreResult<Changed> {
        match Self::fetch_task(tx, id).await? {
            Some(row) => {
                let mut e = flow_of_row(&row, kind, now);
                e.detail = detail.or(e.detail);
                events::record(tx, &[e]).await?;
                Ok(Changed::Done(Box::new(row.into_record()?)))
            }
            None => Ok(Changed::NotFound),
        }
    }
}
