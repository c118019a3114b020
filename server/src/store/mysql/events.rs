//! Events on MySQL: the event log read, and the events of a job written at its
//! end with what follows a task's end (its dependents resolved, a dead-letter
//! notice filed).
//!
//! Event ids come from the one-row counter `event_seq`, advanced by the job's
//! last statements: the row lock is held from there to the commit, so jobs that
//! record events commit their ids in increasing order, and a reader never sees a
//! smaller id appear after a larger one (every committed event is final). Only
//! the commit itself is serialized. The counter is also what other replicas poll
//! for wake-ups (`native/listen.rs`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::super::events::{event_list_of, event_read_of};
use super::super::flow::{dependency_failed, finished_state, unblocked};
use super::super::row::{from_ms, ms};
use super::super::*;
use super::tx::Pending;
use super::{Job, MysqlStore, marks, rows_of, sql};
use crate::domain::event::EventKind;

#[async_trait]
impl Events for MysqlStore {
    async fn event_list(
        &self,
        task_id: &str,
        after_event_id: i64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>> {
        event_list_of(&self.pool, sql::EVENT_LIST, task_id, after_event_id, limit).await
    }

    /// Ids commit in order (see the module docs): every committed event is final.
    async fn event_read(&self, after_event_id: i64, limit: u32) -> StoreResult<Vec<EventRecord>> {
        event_read_of(&self.pool, sql::EVENT_READ, after_event_id, limit).await
    }

    async fn event_head(&self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(sql::EVENT_HEAD)
            .fetch_one(&self.pool)
            .await?)
    }

    async fn event_purge(&self, before: DateTime<Utc>, limit: u32) -> StoreResult<u64> {
        // Ids grow with time: of the oldest `limit` by id, those older than `before`.
        let ids: Vec<i64> = sqlx::query_scalar(sql::EVENT_PURGE_PICK)
            .bind(i64::from(limit))
            .bind(ms(before))
            .fetch_all(&self.pool)
            .await?;
        let Some(last) = ids.last() else {
            return Ok(0);
        };
        Ok(sqlx::query(sql::EVENT_PURGE)
            .bind(last)
            .bind(ids[0])
            .bind(ms(before))
            .execute(&self.pool)
            .await?
            .rows_affected())
    }
}

/// Rows per INSERT.
const PIECE: usize = 200;

/// Writes the job's events (following up each task that finished), then takes
/// their ids from the counter. With no events, the counter moves only when the
/// job left rows locked that other replicas may have skipped (`spare`).
/// Returns the ids of the events written (first, last), if any.
pub(super) async fn after_job(j: &mut Job) -> StoreResult<Option<(i64, i64)>> {
    let mut all: Vec<Pending> = Vec::new();
    loop {
        let evs = std::mem::take(&mut j.events);
        if evs.is_empty() {
            break;
        }
        // The tasks that finished here and have unresolved dependents, in one read.
        let finished: Vec<&str> = evs
            .iter()
            .filter(|e| {
                matches!(
                    e.kind,
                    EventKind::Succeeded | EventKind::Dead | EventKind::Cancelled
                )
            })
            .map(|e| e.task_id.as_str())
            .collect();
        let mut waited_on: Vec<String> = Vec::new();
        for piece in finished.chunks(500) {
            // Dynamic: one placeholder per finished task.
            let text = format!("{}{})", sql::EVENT_WRITE_WAITED_ON_HEAD, marks(piece.len()));
            let mut q = sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(text));
            for id in piece {
                q = q.bind(*id);
            }
            waited_on.extend(q.fetch_all(j.conn()).await?);
        }
        for e in &evs {
            let Some(state) = finished_state(e.kind) else {
                continue;
            };
            if waited_on.contains(&e.task_id) {
                resolve(j, &e.task_id, state, e.time).await?;
            }
            if e.kind == EventKind::Dead {
                dead_letter(j, &e.task_id, &e.queue, e.time).await?;
            }
        }
        all.extend(evs);
    }
    if all.is_empty() && !j.spare {
        return Ok(None);
    }
    // One more than the events: an id no event holds tells pollers to look at
    // every queue (`native/listen.rs`) when the job left locked rows untaken.
    let k = all.len() as i64 + i64::from(j.spare);
    // LAST_INSERT_ID(expr) comes back in the statement's answer: one round trip.
    let last = sqlx::query(sql::EVENT_WRITE_TAKE_IDS)
        .bind(k)
        .execute(j.conn())
        .await?
        .last_insert_id();
    let last = i64::try_from(last).map_err(|_| StoreError::Corrupt("event id".into()))?;
    let first = last - k + 1;
    let mut base = first;
    for piece in super::native::packet::pieces(&all, PIECE, j.packet, event_bytes) {
        // Dynamic: one row per event, as many as fit a packet.
        let text = format!(
            "{} {}",
            sql::EVENT_WRITE_INSERT_HEAD,
            rows_of(piece.len(), sql::EVENT_WRITE_INSERT_ROW)
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(text));
        for (i, e) in piece.iter().enumerate() {
            q = q
                .bind(base + i as i64)
                .bind(&e.task_id)
                .bind(&e.queue)
                .bind(e.kind.as_str())
                .bind(e.state)
                .bind(e.attempt)
                .bind(&e.worker)
                .bind(e.time)
                .bind(&e.detail);
        }
        q.execute(j.conn()).await?;
        base += piece.len() as i64;
    }
    Ok((!all.is_empty()).then(|| (first, first + all.len() as i64 - 1)))
}

/// What one event's row adds to the multi-row INSERT of `after_job`.
fn event_bytes(e: &Pending) -> usize {
    use super::native::packet::{PARAM_FRAMING, opt_param, param};
    param(e.task_id.len())
        + param(e.queue.len())
        + opt_param(e.worker.as_deref())
        + opt_param(e.detail.as_deref())
        // The id, kind, state, attempt and time.
        + 5 * (32 + PARAM_FRAMING)
}

/// A task went DEAD: a notice task on its queue's dead-letter queue, if it has one.
async fn dead_letter(j: &mut Job, id: &str, queue: &str, at: i64) -> StoreResult<()> {
    let dlq: Option<String> = sqlx::query_scalar(sql::EVENT_WRITE_DEAD_LETTER_QUEUE)
        .bind(queue)
        .bind(queue)
        .fetch_optional(j.conn())
        .await?;
    let Some(dlq) = dlq else {
        return Ok(());
    };
    let dead: (Option<String>, i64, Option<String>) = sqlx::query_as(sql::EVENT_WRITE_DEAD_TASK)
        .bind(id)
        .fetch_one(j.conn())
        .await?;
    let notice = super::super::events::dead_letter_notice(id, queue, &dlq, dead, at);
    Box::pin(super::rows::insert_many(
        j,
        std::slice::from_ref(&notice),
        from_ms(at),
    ))
    .await?;
    j.woken.push(dlq);
    Ok(())
}

/// One finished dependency: count it off its blocked dependents (the last one
/// unblocks), or cancel them when it failed and they do not run anyway.
async fn resolve(j: &mut Job, dep: &str, dep_state: &str, at: i64) -> StoreResult<()> {
    let dependents: Vec<(String, String, bool, String, i64)> =
        sqlx::query_as(sql::EVENT_WRITE_DEPENDENTS)
            .bind(dep)
            .fetch_all(j.conn())
            .await?;
    sqlx::query(sql::EVENT_WRITE_RESOLVE)
        .bind(dep)
        .execute(j.conn())
        .await?;
    for (id, state, run_if, queue, attempt) in dependents {
        if state != "blocked" {
            continue;
        }
        if dep_state == "succeeded" || run_if {
            let n = sqlx::query(sql::EVENT_WRITE_COUNT_OFF)
                .bind(at)
                .bind(&id)
                .execute(j.conn())
                .await?
                .rows_affected();
            if n == 0 {
                continue;
            }
            let (state, run_at): (String, i64) = sqlx::query_as(sql::EVENT_WRITE_UNBLOCKED)
                .bind(&id)
                .fetch_one(j.conn())
                .await?;
            if state == "pending" {
                j.push(unblocked(&id, &queue, run_at, attempt, at));
                j.woken.push(queue);
            }
        } else {
            // Its own dependents are told when after_job reads its event in turn.
            let n = sqlx::query(sql::EVENT_WRITE_CANCEL_DEPENDENT)
                .bind(at)
                .bind(at)
                .bind(&id)
                .execute(j.conn())
                .await?
                .rows_affected();
            if n > 0 {
                j.push(dependency_failed(&id, &queue, attempt, at));
            }
        }
    }
    Ok(())
}
