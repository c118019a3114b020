//! Flow on SQLite: inserts with dependencies, resolving dependents, the
//! event log, bulk operations.
//!
//! Every operation pushes the events of its transitions (store/sqlite/events.rs).
//! [`after_job`] runs at the end of every write job (inside its savepoint): it
//! writes them, tells the dependents of each task that finished (one finished
//! task at a time, so a cancelled chain of any length is walked iteratively),
//! and files a dead-letter notice for each task that went DEAD in a queue that
//! has a dead-letter queue.

use std::cell::RefCell;
use std::collections::HashMap;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};
use sqlx::SqlitePool;

use super::super::flow::{Ev, EventRow, event_record, schedule_json, visible};
use super::super::row::{TaskRow, from_ms, ms, state_filter_sql};
use super::super::*;
use super::{events, key_waits, ops};
use crate::domain::event::EventKind;

thread_local! {
    /// The writer thread's wake-up for queues that got pending tasks.
    static WAKER: RefCell<Option<Waker>> = const { RefCell::new(None) };
    /// Queues unblocked by the running batch, woken after it commits.
    static WOKEN: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Installs the wake-up on the writer thread (run as a write job).
pub(super) fn set_waker(wake: Waker) {
    WAKER.with(|w| *w.borrow_mut() = Some(wake));
}

/// After a batch committed: wakes the queues whose tasks were unblocked.
pub(super) fn after_commit() {
    let queues = WOKEN.with(|w| std::mem::take(&mut *w.borrow_mut()));
    if queues.is_empty() {
        return;
    }
    WAKER.with(|w| {
        if let Some(wake) = w.borrow().as_ref() {
            for q in &queues {
                wake(Some(q));
            }
        }
    });
}

/// Writes the job's events, then tells the dependents of every task that
/// finished in this job and files dead-letter notices (whose events are written
/// in turn).
pub(super) fn after_job(c: &Connection) -> StoreResult<()> {
    loop {
        let evs = events::take();
        if evs.is_empty() {
            return Ok(());
        }
        events::write(c, &evs)?;
        for e in &evs {
            let state = match e.kind {
                EventKind::Succeeded => "succeeded",
                EventKind::Dead => "dead",
                EventKind::Cancelled => "cancelled",
                _ => continue,
            };
            let waited_on = c
                .prepare_cached(
                    "SELECT 1 FROM task_deps WHERE depends_on = ?1 AND NOT resolved LIMIT 1",
                )?
                .exists([&e.task_id])?;
            if waited_on {
                resolve(c, &e.task_id, state, e.time)?;
            }
            if e.kind == EventKind::Dead {
                dead_letter(c, &e.task_id, &e.queue, e.time)?;
            }
        }
    }
}

/// A task went DEAD: a notice task on its queue's dead-letter queue, if it has one.
fn dead_letter(c: &Connection, id: &str, queue: &str, at: i64) -> StoreResult<()> {
    let dlq: Option<String> = c
        .prepare_cached(
            "SELECT dead_letter_queue FROM queue_dead_letters \
             WHERE queue = ?1 AND dead_letter_queue <> ?1",
        )?
        .query_row([queue], |r| r.get(0))
        .optional()?;
    let Some(dlq) = dlq else {
        return Ok(());
    };
    let (key, attempts, error): (Option<String>, i64, Option<String>) = c
        .prepare_cached("SELECT key, attempt, last_error FROM tasks WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
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
    ops::task_insert_many(c, std::slice::from_ref(&notice), from_ms(at))?;
    WOKEN.with(|w| w.borrow_mut().push(dlq));
    Ok(())
}

/// One finished dependency: count it off its blocked dependents (the last one
/// unblocks), or cancel them when it failed and they do not run anyway.
fn resolve(c: &Connection, dep: &str, dep_state: &str, at: i64) -> StoreResult<()> {
    let dependents: Vec<(String, String, bool, String, i64)> = c
        .prepare_cached(
            "SELECT d.task_id, t.state, t.run_if_dependency_fails, t.queue, t.attempt \
             FROM task_deps d \
             JOIN tasks t ON t.id = d.task_id WHERE d.depends_on = ?1 AND NOT d.resolved",
        )?
        .query_map([dep], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<Result<_, _>>()?;
    c.prepare_cached("UPDATE task_deps SET resolved = 1 WHERE depends_on = ?1 AND NOT resolved")?
        .execute([dep])?;
    for (id, state, run_if, queue, attempt) in dependents {
        if state != "blocked" {
            continue;
        }
        if dep_state == "succeeded" || run_if {
            let now_pending: Option<(String, i64)> = c
                .prepare_cached(
                    "UPDATE tasks SET deps_remaining = deps_remaining - 1, \
                       state = CASE WHEN deps_remaining <= 1 THEN 'pending' ELSE state END, \
                       updated_at = ?2 WHERE id = ?1 AND state = 'blocked' RETURNING state, run_at",
                )?
                .query_row(params![id, at], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            if let Some(("pending", run_at)) = now_pending.as_ref().map(|(s, r)| (s.as_str(), *r)) {
                events::push(Ev {
                    task_id: &id,
                    queue: &queue,
                    kind: EventKind::Unblocked,
                    state: visible("pending", run_at, at),
                    attempt,
                    worker: None,
                    time: at,
                    detail: None,
                });
                WOKEN.with(|w| w.borrow_mut().push(queue));
            }
        } else {
            // Its own dependents are told when after_job reads its event in turn.
            let n = c
                .prepare_cached(
                    "UPDATE tasks SET state = 'cancelled', cancel_reason = 'dependency_failed', \
                       last_error = 'DEPENDENCY_FAILED', finished_at = ?2, updated_at = ?2 \
                     WHERE id = ?1 AND state = 'blocked'",
                )?
                .execute(params![id, at])?;
            if n > 0 {
                events::push(Ev {
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

fn state_of(c: &Connection, id: &str) -> StoreResult<Option<String>> {
    Ok(c.prepare_cached("SELECT state FROM tasks WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?)
}

pub(super) fn insert(
    c: &Connection,
    tasks: &[NewTask],
    flows: &[FlowSpec],
    now: DateTime<Utc>,
    commit_by: Option<std::time::Instant>,
) -> StoreResult<FlowInserted> {
    // One writer: what is read here cannot change before the job ends. An
    // unknown dependency (or another producer's), a key with too many waits,
    // or a commit-by instant that passed, undoes the batch's inserts (its own
    // savepoint).
    c.execute_batch("SAVEPOINT flow_insert")?;
    let mark = events::mark();
    let undo = || -> StoreResult<()> {
        c.execute_batch("ROLLBACK TO flow_insert; RELEASE flow_insert")?;
        events::truncate(mark);
        Ok(())
    };
    let inserted = ops::task_insert_many(c, tasks, now)?;
    for (i, f) in flows.iter().enumerate() {
        for (j, d) in f.depends_on.iter().enumerate() {
            if !key_waits::may_name(c, d, f.producer.as_deref())? {
                undo()?;
                return Ok(FlowInserted::UnknownDependency { task: i, dep: j });
            }
        }
    }
    let now = ms(now);
    for (i, f) in flows.iter().enumerate() {
        let Some(r) = inserted.get(i).filter(|r| !r.deduplicated) else {
            continue;
        };
        if f.is_plain() {
            continue;
        }
        let mut deps: Vec<String> = f.depends_on.clone();
        deps.extend(
            f.depends_on_index
                .iter()
                .filter_map(|&j| inserted.get(j).map(|r| r.task_id.clone())),
        );
        // Keys: a key that names a task is a dependency on it; one that names
        // none yet is a wait the insert of a task with that key binds.
        let keys =
            match key_waits::key_deps(c, &r.task_id, &f.depends_on_keys, f.producer.as_deref())? {
                Ok(keys) => keys,
                Err(key) => {
                    undo()?;
                    return Ok(FlowInserted::TooManyWaits { task: i, key });
                }
            };
        deps.extend(keys.bound);
        deps.sort_unstable();
        deps.dedup();
        let mut remaining = keys.waiting;
        let mut failed = false;
        for d in &deps {
            let state = state_of(c, d)?.unwrap_or_default();
            let done = matches!(state.as_str(), "succeeded" | "dead" | "cancelled");
            remaining += i64::from(!done);
            failed |= matches!(state.as_str(), "dead" | "cancelled");
            c.prepare_cached(
                "INSERT INTO task_deps (depends_on, task_id, resolved) VALUES (?1, ?2, ?3) \
                 ON CONFLICT DO NOTHING",
            )?
            .execute(params![d, r.task_id, done])?;
        }
        let state = if failed && !f.run_if_dependency_fails {
            "cancelled"
        } else if remaining > 0 {
            "blocked"
        } else {
            "pending"
        };
        let schedule = schedule_json(&f.retry_schedule);
        c.prepare_cached(
            "UPDATE tasks SET state = ?2, deps_remaining = ?3, run_if_dependency_fails = ?4, \
               retry_schedule = ?5, \
               cancel_reason = CASE WHEN ?2 = 'cancelled' THEN 'dependency_failed' END, \
               last_error = CASE WHEN ?2 = 'cancelled' THEN 'DEPENDENCY_FAILED' ELSE last_error END, \
               finished_at = CASE WHEN ?2 = 'cancelled' THEN ?6 ELSE finished_at END \
             WHERE id = ?1",
        )?
        .execute(params![
            r.task_id,
            state,
            remaining,
            f.run_if_dependency_fails,
            schedule,
            now
        ])?;
        if state == "blocked" {
            events::submitted_blocked(&r.task_id);
        } else if state == "cancelled" {
            let t = &tasks[i];
            events::push(Ev {
                task_id: &r.task_id,
                queue: &t.queue,
                kind: EventKind::Cancelled,
                state: "cancelled",
                attempt: 0,
                worker: None,
                time: now,
                detail: Some("DEPENDENCY_FAILED"),
            });
        }
    }
    if commit_by.is_some_and(|d| std::time::Instant::now() >= d) {
        undo()?;
        return Ok(FlowInserted::DeadlinePassed);
    }
    c.execute_batch("RELEASE flow_insert")?;
    Ok(FlowInserted::Done(inserted))
}

pub(super) async fn flow_info(
    r: &SqlitePool,
    ids: &[String],
) -> StoreResult<HashMap<String, TaskFlowInfo>> {
    let mut out = HashMap::with_capacity(ids.len());
    for id in ids {
        let row: Option<(i64, bool, Option<String>)> = sqlx::query_as(
            "SELECT deps_remaining, run_if_dependency_fails, cancel_reason FROM tasks WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(r)
        .await?;
        let Some((rem, run_if, reason)) = row else {
            continue;
        };
        let deps: Vec<String> = sqlx::query_scalar(
            "SELECT depends_on FROM task_deps WHERE task_id = ? ORDER BY depends_on",
        )
        .bind(id)
        .fetch_all(r)
        .await?;
        let keys: Vec<(String, String)> = sqlx::query_as(
            "SELECT queue, key FROM task_key_deps WHERE task_id = ? ORDER BY queue, key",
        )
        .bind(id)
        .fetch_all(r)
        .await?;
        out.insert(
            id.clone(),
            TaskFlowInfo {
                depends_on: deps,
                depends_on_keys: keys
                    .into_iter()
                    .map(|(queue, key)| TaskKey { queue, key })
                    .collect(),
                deps_remaining: u32::try_from(rem.max(0)).unwrap_or(u32::MAX),
                run_if_dependency_fails: run_if,
                cancel_reason: reason,
            },
        );
    }
    Ok(out)
}

pub(super) async fn event_list(
    r: &SqlitePool,
    task_id: &str,
    after: i64,
    limit: u32,
) -> StoreResult<Vec<EventRecord>> {
    let rows: Vec<EventRow> = sqlx::query_as(
        "SELECT event_id, task_id, queue, kind, state, attempt, worker_id, time, detail \
         FROM task_events WHERE task_id = ? AND event_id > ? ORDER BY event_id LIMIT ?",
    )
    .bind(task_id)
    .bind(after)
    .bind(i64::from(limit))
    .fetch_all(r)
    .await?;
    rows.into_iter().map(event_record).collect()
}

/// One writer commits whole batches in id order: every committed event is final.
pub(super) async fn event_read(
    r: &SqlitePool,
    after: i64,
    limit: u32,
) -> StoreResult<Vec<EventRecord>> {
    let rows: Vec<EventRow> = sqlx::query_as(
        "SELECT event_id, task_id, queue, kind, state, attempt, worker_id, time, detail \
         FROM task_events WHERE event_id > ? ORDER BY event_id LIMIT ?",
    )
    .bind(after)
    .bind(i64::from(limit))
    .fetch_all(r)
    .await?;
    rows.into_iter().map(event_record).collect()
}

pub(super) async fn event_head(r: &SqlitePool) -> StoreResult<i64> {
    // Retention never deletes the newest event, so this is the largest id used.
    let max: Option<i64> = sqlx::query_scalar("SELECT max(event_id) FROM task_events")
        .fetch_one(r)
        .await?;
    Ok(max.unwrap_or(0))
}

pub(super) fn event_purge(c: &Connection, before: DateTime<Utc>, limit: u32) -> StoreResult<u64> {
    let n = c
        .prepare_cached(
            // Ids grow with time: the oldest `limit` by id, those older than
            // `before`, never the newest (its id is where the next one starts).
            "DELETE FROM task_events WHERE event_id IN ( \
               SELECT event_id FROM (SELECT event_id, time FROM task_events \
                 ORDER BY event_id LIMIT ?2) WHERE time < ?1) \
             AND event_id < (SELECT max(event_id) FROM task_events)",
        )?
        .execute(params![ms(before), limit])?;
    Ok(n as u64)
}

pub(super) fn dead_letters_set(c: &Connection, pairs: &[(String, String)]) -> StoreResult<()> {
    c.prepare_cached("DELETE FROM queue_dead_letters")?
        .execute([])?;
    for (q, dlq) in pairs {
        c.prepare_cached(
            "INSERT INTO queue_dead_letters (queue, dead_letter_queue) VALUES (?1, ?2)",
        )?
        .execute(params![q, dlq])?;
    }
    Ok(())
}

pub(super) async fn select(r: &SqlitePool, f: &BulkFilter) -> StoreResult<Vec<TaskRecord>> {
    let mut sql = String::from("SELECT * FROM tasks WHERE queue = ?");
    let mut texts: Vec<String> = vec![f.queue.clone()];
    let mut args: Vec<either::Arg> = vec![either::Arg::Text(0)];
    if let Some(p) = &f.key_prefix {
        sql.push_str(" AND substr(key, 1, length(?)) = ?");
        texts.push(p.clone());
        args.push(either::Arg::Text(texts.len() - 1));
        args.push(either::Arg::Text(texts.len() - 1));
    }
    if let Some(e) = &f.error_contains {
        sql.push_str(" AND instr(COALESCE(last_error, ''), ?) > 0");
        texts.push(e.clone());
        args.push(either::Arg::Text(texts.len() - 1));
    }
    if let Some(t) = f.created_after {
        sql.push_str(" AND created_at >= ?");
        args.push(either::Arg::Int(ms(t)));
    }
    if let Some(t) = f.created_before {
        sql.push_str(" AND created_at < ?");
        args.push(either::Arg::Int(ms(t)));
    }
    if let Some(s) = &f.schedule_id {
        sql.push_str(" AND schedule_id = ?");
        texts.push(s.clone());
        args.push(either::Arg::Text(texts.len() - 1));
    }
    if let Some(s) = state_filter_sql(&f.states, &ms(f.now).to_string()) {
        sql.push_str(" AND ");
        sql.push_str(&s);
    }
    sql.push_str(" ORDER BY seq LIMIT ?");
    args.push(either::Arg::Int(i64::from(f.limit)));
    let mut q = sqlx::query_as::<_, TaskRow>(sqlx::AssertSqlSafe(sql));
    for a in args {
        q = match a {
            either::Arg::Text(i) => q.bind(texts[i].clone()),
            either::Arg::Int(v) => q.bind(v),
        };
    }
    q.fetch_all(r)
        .await?
        .into_iter()
        .map(TaskRow::into_record)
        .collect()
}

mod either {
    /// A bound value of a built query: an index into the text values, or a number.
    pub enum Arg {
        Text(usize),
        Int(i64),
    }
}

pub(super) fn cancel_many(
    c: &Connection,
    ids: &[String],
    now: DateTime<Utc>,
) -> StoreResult<BulkCancelled> {
    let now = ms(now);
    let mut out = BulkCancelled::default();
    for id in ids {
        let cancelled: Option<(String, i64)> = c
            .prepare_cached(
                "UPDATE tasks SET state = 'cancelled', cancel_reason = 'operator', \
                   finished_at = ?2, updated_at = ?2 \
                 WHERE id = ?1 AND state IN ('pending', 'blocked') RETURNING queue, attempt",
            )?
            .query_row(params![id, now], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if let Some((queue, attempt)) = &cancelled {
            out.cancelled += 1;
            events::push(simple(
                id,
                queue,
                EventKind::Cancelled,
                "cancelled",
                *attempt,
                now,
            ));
        }
        let requested: Option<(String, i64)> = c
            .prepare_cached(
                "UPDATE tasks SET cancel_requested = 1, updated_at = ?2 \
                 WHERE id = ?1 AND state = 'leased' AND NOT cancel_requested \
                 RETURNING queue, attempt",
            )?
            .query_row(params![id, now], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if let Some((queue, attempt)) = &requested {
            out.cancel_requested += 1;
            events::push(simple(
                id,
                queue,
                EventKind::Updated,
                "leased",
                *attempt,
                now,
            ));
        }
    }
    Ok(out)
}

pub(super) fn requeue_many(
    c: &Connection,
    tasks: &[(String, DateTime<Utc>)],
    now: DateTime<Utc>,
) -> StoreResult<u64> {
    let now = ms(now);
    let mut n = 0;
    for (id, run_at) in tasks {
        let row: Option<(String, i64)> = c
            .prepare_cached(
                "UPDATE tasks SET state = 'pending', run_at = ?2, waiting = ?2 > ?3, \
                   attempts_allowed = attempt + max_attempts, cancel_requested = 0, \
                   cancel_reason = NULL, finished_at = NULL, updated_at = ?3 \
                 WHERE id = ?1 AND state IN ('dead', 'cancelled') RETURNING queue, attempt",
            )?
            .query_row(params![id, ms(*run_at), now], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        if let Some((q, attempt)) = row {
            n += 1;
            let state = visible("pending", ms(*run_at), now);
            events::push(simple(id, &q, EventKind::Requeued, state, attempt, now));
            WOKEN.with(|w| w.borrow_mut().push(q));
        }
    }
    Ok(n)
}

/// An event with no worker and no detail.
pub(super) fn simple<'a>(
    task_id: &'a str,
    queue: &'a str,
    kind: EventKind,
    state: &'static str,
    attempt: i64,
    time: i64,
) -> Ev<'a> {
    Ev {
        task_id,
        queue,
        kind,
        state,
        attempt,
        worker: None,
        time,
        detail: None,
    }
}

/// See [`Store::task_keys_missing`].
pub(super) async fn keys_missing(
    r: &SqlitePool,
    task_id: &str,
    limit: u32,
) -> StoreResult<Vec<TaskKey>> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT queue, key FROM task_key_deps WHERE task_id = ? AND bound_to IS NULL \
         ORDER BY queue, key LIMIT ?",
    )
    .bind(task_id)
    .bind(i64::from(limit))
    .fetch_all(r)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(queue, key)| TaskKey { queue, key })
        .collect())
}

/// See [`Store::task_dependency_results`].
pub(super) async fn dependency_results(
    r: &SqlitePool,
    task_ids: &[String],
) -> StoreResult<Vec<(String, String, Vec<u8>)>> {
    let mut out = Vec::new();
    for piece in task_ids.chunks(500) {
        let sql = format!(
            "SELECT d.task_id, t.id, COALESCE(t.result, x'') FROM task_deps d \
             JOIN tasks t ON t.id = d.depends_on \
             WHERE d.task_id IN ({}) AND t.state = 'succeeded' ORDER BY d.task_id, t.id",
            vec!["?"; piece.len()].join(", ")
        );
        let mut q = sqlx::query_as::<_, (String, String, Vec<u8>)>(sqlx::AssertSqlSafe(sql));
        for id in piece {
            q = q.bind(id);
        }
        out.extend(q.fetch_all(r).await?);
    }
    Ok(out)
}

/// See [`Store::task_dependency_result_sizes`].
pub(super) async fn dependency_result_sizes(
    r: &SqlitePool,
    task_ids: &[String],
) -> StoreResult<Vec<(String, u64, u64)>> {
    let mut out = Vec::new();
    for piece in task_ids.chunks(500) {
        let sql = format!(
            "SELECT d.task_id, count(*), sum(length(t.id) + COALESCE(length(t.result), 0)) \
             FROM task_deps d JOIN tasks t ON t.id = d.depends_on \
             WHERE d.task_id IN ({}) AND t.state = 'succeeded' GROUP BY d.task_id",
            vec!["?"; piece.len()].join(", ")
        );
        let mut q = sqlx::query_as::<_, (String, i64, i64)>(sqlx::AssertSqlSafe(sql));
        for id in piece {
            q = q.bind(id);
        }
        out.extend(
            q.fetch_all(r)
                .await?
                .into_iter()
                .map(|(id, n, bytes)| (id, n.max(0) as u64, bytes.max(0) as u64)),
        );
    }
    Ok(out)
}
