//! Flow on MySQL: the events of a job, written at its end, and what follows a
//! task's end (its dependents resolved, a dead-letter notice filed).
//!
//! Event ids come from the one-row counter `event_seq`, advanced by the job's
//! last statements: the row lock is held from there to the commit, so jobs that
//! record events commit their ids in increasing order, and a reader never sees a
//! smaller id appear after a larger one (every committed event is final). Only
//! the commit itself is serialized. The counter is also what other replicas poll
//! for wake-ups (`listen.rs`).

use super::super::flow::{Ev, visible};
use super::super::row::from_ms;
use super::super::*;
use super::Job;
use crate::domain::event::EventKind;

/// An event waiting for the end of its job.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub task_id: String,
    pub queue: String,
    pub kind: EventKind,
    pub state: &'static str,
    pub attempt: i64,
    pub worker: Option<String>,
    pub time: i64,
    pub detail: Option<String>,
}

impl Job {
    /// Buffers an event of this job.
    pub fn push(&mut self, e: Ev<'_>) {
        self.events.push(Pending {
            task_id: e.task_id.to_owned(),
            queue: e.queue.to_owned(),
            kind: e.kind,
            state: e.state,
            attempt: e.attempt,
            worker: e.worker.map(str::to_owned),
            time: e.time,
            detail: e.detail.map(str::to_owned),
        });
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
            let mut qb = sqlx::QueryBuilder::<sqlx::MySql>::new(
                "SELECT DISTINCT depends_on FROM task_deps WHERE NOT resolved AND depends_on IN (",
            );
            let mut sep = qb.separated(", ");
            for id in piece {
                sep.push_bind(*id);
            }
            qb.push(")");
            waited_on.extend(
                qb.build_query_scalar::<String>()
                    .fetch_all(j.conn())
                    .await?,
            );
        }
        for e in &evs {
            let state = match e.kind {
                EventKind::Succeeded => "succeeded",
                EventKind::Dead => "dead",
                EventKind::Cancelled => "cancelled",
                _ => continue,
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
    // every queue (`listen.rs`) when the job left locked rows untaken.
    let k = all.len() as i64 + i64::from(j.spare);
    // LAST_INSERT_ID(expr) comes back in the statement's answer: one round trip.
    let last = sqlx::query("UPDATE event_seq SET n = LAST_INSERT_ID(n + ?) WHERE id = 1")
        .bind(k)
        .execute(j.conn())
        .await?
        .last_insert_id();
    let last = i64::try_from(last).map_err(|_| StoreError::Corrupt("event id".into()))?;
    let first = last - k + 1;
    let mut base = first;
    for piece in super::packet::pieces(&all, PIECE, j.packet, event_bytes) {
        let mut qb = sqlx::QueryBuilder::<sqlx::MySql>::new(
            "INSERT INTO task_events (event_id, task_id, queue, kind, state, attempt, \
             worker_id, `time`, detail) ",
        );
        qb.push_values(piece.iter().enumerate(), |mut b, (i, e)| {
            b.push_bind(base + i as i64)
                .push_bind(&e.task_id)
                .push_bind(&e.queue)
                .push_bind(e.kind.as_str())
                .push_bind(e.state)
                .push_bind(e.attempt)
                .push_bind(&e.worker)
                .push_bind(e.time)
                .push_bind(&e.detail);
        });
        qb.build().execute(j.conn()).await?;
        base += piece.len() as i64;
    }
    Ok((!all.is_empty()).then(|| (first, first + all.len() as i64 - 1)))
}

/// What one event's row adds to the multi-row INSERT of `after_job`.
fn event_bytes(e: &Pending) -> usize {
    use super::packet::{PARAM_FRAMING, opt_param, param};
    param(e.task_id.len())
        + param(e.queue.len())
        + opt_param(e.worker.as_deref())
        + opt_param(e.detail.as_deref())
        // The id, kind, state, attempt and time.
        + 5 * (32 + PARAM_FRAMING)
}

/// A task went DEAD: a notice task on its queue's dead-letter queue, if it has one.
async fn dead_letter(j: &mut Job, id: &str, queue: &str, at: i64) -> StoreResult<()> {
    let dlq: Option<String> = sqlx::query_scalar(
        "SELECT dead_letter_queue FROM queue_dead_letters \
         WHERE queue = ? AND dead_letter_queue <> ?",
    )
    .bind(queue)
    .bind(queue)
    .fetch_optional(j.conn())
    .await?;
    let Some(dlq) = dlq else {
        return Ok(());
    };
    let (key, attempts, error): (Option<String>, i64, Option<String>) =
        sqlx::query_as("SELECT `key`, attempt, last_error FROM tasks WHERE id = ?")
            .bind(id)
            .fetch_one(j.conn())
            .await?;
    let payload = serde_json::json!({
        "task_id": id, "queue": queue, "key": key, "attempts": attempts, "last_error": error,
    });
    let notice = NewTask {
        id: uuid::Uuid::now_v7().to_string(),
        queue: dlq.clone(),
        key: None,
        payload: payload.to_string().into_bytes(),
        priority: 0,
        run_at: from_ms(at),
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
    };
    Box::pin(super::ops::task_insert_many(
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
    let dependents: Vec<(String, String, bool, String, i64)> = sqlx::query_as(
        "SELECT d.task_id, t.state, t.run_if_dependency_fails, t.queue, t.attempt \
         FROM task_deps d JOIN tasks t ON t.id = d.task_id \
         WHERE d.depends_on = ? AND NOT d.resolved FOR UPDATE",
    )
    .bind(dep)
    .fetch_all(j.conn())
    .await?;
    sqlx::query("UPDATE task_deps SET resolved = TRUE WHERE depends_on = ? AND NOT resolved")
        .bind(dep)
        .execute(j.conn())
        .await?;
    for (id, state, run_if, queue, attempt) in dependents {
        if state != "blocked" {
            continue;
        }
        if dep_state == "succeeded" || run_if {
            let n = sqlx::query(
                "UPDATE tasks SET state = CASE WHEN deps_remaining <= 1 THEN 'pending' \
                   ELSE state END, deps_remaining = deps_remaining - 1, updated_at = ? \
                 WHERE id = ? AND state = 'blocked'",
            )
            .bind(at)
            .bind(&id)
            .execute(j.conn())
            .await?
            .rows_affected();
            if n == 0 {
                continue;
            }
            let (state, run_at): (String, i64) =
                sqlx::query_as("SELECT state, run_at FROM tasks WHERE id = ?")
                    .bind(&id)
                    .fetch_one(j.conn())
                    .await?;
            if state == "pending" {
                j.push(Ev {
                    task_id: &id,
                    queue: &queue,
                    kind: EventKind::Unblocked,
                    state: visible("pending", run_at, at),
                    attempt,
                    worker: None,
                    time: at,
                    detail: None,
                });
                j.woken.push(queue);
            }
        } else {
            // Its own dependents are told when after_job reads its event in turn.
            let n = sqlx::query(
                "UPDATE tasks SET state = 'cancelled', cancel_reason = 'dependency_failed', \
                   last_error = 'DEPENDENCY_FAILED', finished_at = ?, updated_at = ? \
                 WHERE id = ? AND state = 'blocked'",
            )
            .bind(at)
            .bind(at)
            .bind(&id)
            .execute(j.conn())
            .await?
            .rows_affected();
            if n > 0 {
                j.push(Ev {
                    task_id: &id,
                    queue: &queue,
                    kind: EventKind::Cancelled,
                    state: "cancelled",
                    attempt,
                    worker: None,
                    time: at,
                    detail: Some("DEPENDENCY_FAILED"),
                });
            }
        }
    }
    Ok(())
}
