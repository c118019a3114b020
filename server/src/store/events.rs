//! The event log.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::*;
use crate::domain::event::EventKind;

/// One recorded transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    pub event_id: i64,
    pub task_id: String,
    pub queue: String,
    pub kind: EventKind,
    pub state: TaskState,
    pub attempt: u32,
    pub worker_id: Option<String>,
    pub time: DateTime<Utc>,
    pub detail: Option<String>,
}

/// Reads a stored event row: (event_id, task_id, queue, kind, state, attempt,
/// worker_id, time, detail).
pub(crate) type EventRow = (
    i64,
    String,
    String,
    String,
    String,
    i64,
    Option<String>,
    i64,
    Option<String>,
);

/// A stored event row as its record.
pub(crate) fn event_record(r: EventRow) -> Result<EventRecord, StoreError> {
    let (event_id, task_id, queue, kind, state, attempt, worker_id, time, detail) = r;
    Ok(EventRecord {
        kind: EventKind::parse(&kind)
            .ok_or_else(|| StoreError::Corrupt(format!("event kind {kind:?}")))?,
        state: crate::domain::event::parse_visible_state(&state)
            .ok_or_else(|| StoreError::Corrupt(format!("event state {state:?}")))?,
        event_id,
        task_id,
        queue,
        attempt: u32::try_from(attempt.max(0)).unwrap_or(u32::MAX),
        worker_id,
        time: super::row::from_ms(time),
        detail,
    })
}

/// The event log: a task's events, the ordered feed that WatchTasks and the outbox
/// read, and its retention.
#[async_trait]
pub trait Events: Send + Sync + 'static {
    /// One task's events after `after_event_id`, oldest first, up to `limit`.
    async fn event_list(
        &self,
        task_id: &str,
        after_event_id: i64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>>;

    /// Events after `after_event_id` in id order, up to `limit`, and only final
    /// ones: no event with a smaller id than one returned can appear later.
    async fn event_read(&self, after_event_id: i64, limit: u32) -> StoreResult<Vec<EventRecord>>;

    /// A cursor that every event recorded from now on lies after.
    async fn event_head(&self) -> StoreResult<i64>;

    /// An id at or above every committed event's: a cursor beyond it names no
    /// event anybody can have seen in this database (a stale one, or made up).
    async fn event_ceiling(&self) -> StoreResult<i64> {
        self.event_head().await
    }

    /// The time (ms) of the oldest committed event that `event_read` does not
    /// return yet (it waits for a writer that started earlier), if any. Never on
    /// a store whose committed events are all final.
    async fn event_held_since(&self) -> StoreResult<Option<i64>> {
        Ok(None)
    }

    /// Deletes up to `limit` events recorded before `before`; returns how many.
    async fn event_purge(&self, before: DateTime<Utc>, limit: u32) -> StoreResult<u64>;
}

/// `Events::event_list` from the backend's `EVENT_LIST` (bound: the task,
/// the event id to read after, the limit). The same on every database; only
/// the pool differs.
pub(crate) async fn event_list_of<DB>(
    pool: &sqlx::Pool<DB>,
    stmt: &'static str,
    task_id: &str,
    after_event_id: i64,
    limit: u32,
) -> StoreResult<Vec<EventRecord>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> EventRow: sqlx::FromRow<'r, DB::Row>,
{
    let rows: Vec<EventRow> = sqlx::query_as::<DB, EventRow>(stmt)
        .bind(task_id)
        .bind(after_event_id)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
    rows.into_iter().map(event_record).collect()
}

/// `Events::event_read` from the backend's `EVENT_READ` (bound: the event id
/// to read after, the limit), on a database whose ids commit in order (SQLite,
/// MySQL; Postgres reads its horizon first). Only the pool differs.
pub(crate) async fn event_read_of<DB>(
    pool: &sqlx::Pool<DB>,
    stmt: &'static str,
    after_event_id: i64,
    limit: u32,
) -> StoreResult<Vec<EventRecord>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> EventRow: sqlx::FromRow<'r, DB::Row>,
{
    let rows: Vec<EventRow> = sqlx::query_as::<DB, EventRow>(stmt)
        .bind(after_event_id)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
    rows.into_iter().map(event_record).collect()
}

/// The notice task a dead task leaves on its queue's dead-letter queue `dlq`:
/// the dead task's id, queue, key, attempts and last error as a JSON payload,
/// due `at` (ms), retried as any notice is. The same on every database that
/// writes it in Rust (SQLite, MySQL).
pub(crate) fn dead_letter_notice(
    id: &str,
    queue: &str,
    dlq: &str,
    (key, attempts, error): (Option<String>, i64, Option<String>),
    at: i64,
) -> NewTask {
    let payload = serde_json::json!({
        "task_id": id, "queue": queue, "key": key, "attempts": attempts, "last_error": error,
    });
    NewTask {
        id: uuid::Uuid::now_v7().to_string(),
        queue: dlq.to_owned(),
        key: None,
        payload: payload.to_string().into_bytes(),
        priority: 0,
        run_at: super::row::from_ms(at),
        deadline: None,
        retry: crate::domain::retry::RetryPolicy {
            max_attempts: 3,
            initial_backoff: std::time::Duration::from_secs(10),
            backoff_multiplier: 2.0,
            max_backoff: std::time::Duration::from_secs(3600),
            jitter: 0.2,
        },
        metadata: [("dead_task_id".to_owned(), id.to_owned())].into(),
        routing: Default::default(),
        concurrency_key: None,
        checkpoint: None,
    }
}
