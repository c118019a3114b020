//! The event log on SQLite: its reads on the reader pool, its purge, and how a
//! job's events (buffered by `tx`) become rows of `task_events`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{Connection, ToSql, params, params_from_iter};

use super::super::events::{event_list_of, event_read_of};
use super::super::row::ms;
use super::super::*;
use super::tx::Pending;
use super::{SqliteStore, sql};

#[async_trait]
impl Events for SqliteStore {
    async fn event_list(
        &self,
        task_id: &str,
        after_event_id: i64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>> {
        event_list_of(
            &self.reader,
            sql::EVENT_LIST,
            task_id,
            after_event_id,
            limit,
        )
        .await
    }

    /// One writer commits whole batches in id order: every committed event is final.
    async fn event_read(&self, after_event_id: i64, limit: u32) -> StoreResult<Vec<EventRecord>> {
        event_read_of(&self.reader, sql::EVENT_READ, after_event_id, limit).await
    }

    async fn event_head(&self) -> StoreResult<i64> {
        let max: Option<i64> = sqlx::query_scalar(sql::EVENT_HEAD)
            .fetch_one(&self.reader)
            .await?;
        Ok(max.unwrap_or(0))
    }

    async fn event_purge(&self, before: DateTime<Utc>, limit: u32) -> StoreResult<u64> {
        self.write(move |c| {
            let n = c
                .prepare_cached(sql::EVENT_PURGE)?
                .execute(params![ms(before), limit])?;
            Ok(n as u64)
        })
        .await
    }
}

/// Rows per INSERT statement: a batch is written in pieces of these sizes, so
/// four prepared statements serve every batch (8 values a row, well under
/// SQLite's limit of 32,766).
const PIECES: [usize; 4] = [64, 16, 4, 1];

/// Writes events in order.
pub(super) fn write(c: &Connection, evs: &[Pending]) -> StoreResult<()> {
    let mut rest = evs;
    while !rest.is_empty() {
        let n = PIECES.into_iter().find(|&n| n <= rest.len()).unwrap_or(1);
        let (piece, tail) = rest.split_at(n);
        rest = tail;
        let kinds: Vec<&'static str> = piece.iter().map(|e| e.kind.as_str()).collect();
        let mut args: Vec<&dyn ToSql> = Vec::with_capacity(n * 8);
        for (e, kind) in piece.iter().zip(&kinds) {
            args.push(&e.task_id);
            args.push(&e.queue);
            args.push(kind);
            args.push(&e.state);
            args.push(&e.attempt);
            args.push(&e.worker);
            args.push(&e.time);
            args.push(&e.detail);
        }
        c.prepare_cached(insert_sql_cached(n))?
            .execute(params_from_iter(args))?;
    }
    Ok(())
}

/// The INSERT of `rows` events, built once per piece size (not a new
/// string per job just to look the prepared statement up).
fn insert_sql_cached(rows: usize) -> &'static str {
    static SQL: std::sync::OnceLock<[String; 4]> = std::sync::OnceLock::new();
    let all = SQL.get_or_init(|| PIECES.map(insert_sql));
    match PIECES.iter().position(|&n| n == rows) {
        Some(i) => &all[i],
        None => all[PIECES.len() - 1].as_str(),
    }
}

/// Dynamic: `event_insert` with its row of values repeated `rows` times, one
/// statement per piece size.
fn insert_sql(rows: usize) -> String {
    let one = sql::EVENT_INSERT;
    let row = &one[one.rfind('(').unwrap_or(0)..];
    let mut sql = String::from(one);
    for _ in 1..rows {
        sql.push_str(", ");
        sql.push_str(row);
    }
    sql
}
