//! Flow on MySQL: inserts with dependencies, the event log, bulk operations.
//! What follows a task's end (dependents, dead letters) is in `events.rs`.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::{MySql, MySqlPool};

use super::super::flow::{
    Ev, EventRow, event_record, may_depend, producer_in, schedule_json, visible,
};
use super::super::row::{TaskRow, ms, state_filter_sql};
use super::super::*;
use super::observe::simple;
use super::{Job, TASK_COLUMNS};
use crate::domain::event::EventKind;

/// A dependency's state, its row locked until the job ends: a dependency
/// cannot finish unseen between this read and the commit (its finishing job
/// waits, then sees the new edge). An exclusive lock, as the row is marked
/// `has_dependents` next (a shared one would have to be upgraded, and two
/// inserts upgrading at once deadlock).
async fn state_of(j: &mut Job, id: &str) -> StoreResult<Option<String>> {
    Ok(
        sqlx::query_scalar("SELECT state FROM tasks WHERE id = ? FOR UPDATE")
            .bind(id)
            .fetch_optional(j.conn())
            .await?,
    )
}

/// Whether a dependent of `producer` may name the task `id` (it exists and,
/// with a producer, is that producer's).
async fn may_name(j: &mut Job, id: &str, producer: Option<&str>) -> StoreResult<bool> {
    let metadata: Option<String> = sqlx::query_scalar("SELECT metadata FROM tasks WHERE id = ?")
        .bind(id)
        .fetch_optional(j.conn())
        .await?;
    Ok(metadata.is_some_and(|m| may_depend(producer, producer_in(&m).as_deref())))
}

/// The task holding `key` that a dependent of `producer` may name: a key held
/// by another producer's task is, for that dependent, a key no task holds.
async fn holder(j: &mut Job, key: &TaskKey, producer: Option<&str>) -> StoreResult<Option<String>> {
    let row: Option<(String, String)> =
        sqlx::query_as("SELECT id, metadata FROM tasks WHERE queue = ? AND `key` = ?")
            .bind(&key.queue)
            .bind(&key.key)
            .fetch_optional(j.conn())
            .await?;
    Ok(row
        .filter(|(_, m)| may_depend(producer, producer_in(m).as_deref()))
        .map(|(id, _)| id))
}

/// Inserts with dependencies; an unknown dependency answers before anything is
/// committed (the caller drops the job, which rolls back).
pub(super) async fn insert(
    j: &mut Job,
    tasks: &[NewTask],
    flows: &[FlowSpec],
    now: DateTime<Utc>,
) -> StoreResult<FlowInserted> {
    if flows.iter().any(|f| !f.depends_on_keys.is_empty()) {
        // Before anything else (so no keyed insert of this batch holds it
        // shared first): see key_waits.rs.
        sqlx::query("SELECT id FROM key_deps_lock WHERE id = 1 FOR UPDATE")
            .fetch_optional(j.conn())
            .await?;
    }
    // First the tasks: a dependency may name one of this batch.
    let inserted = super::ops::task_insert_many(j, tasks, now).await?;
    for (i, f) in flows.iter().enumerate() {
        for (k, d) in f.depends_on.iter().enumerate() {
            if !may_name(j, d, f.producer.as_deref()).await? {
                return Ok(FlowInserted::UnknownDependency { task: i, dep: k });
            }
        }
    }
    // Waits past the cap refuse the call (the waits of this batch counted).
    let mut held: HashMap<(&TaskKey, Option<&str>), i64> = HashMap::new();
    for (i, f) in flows.iter().enumerate() {
        if inserted.get(i).is_none_or(|r| r.deduplicated) || f.is_plain() {
            continue;
        }
        let p = f.producer.as_deref();
        for (k, key) in f.depends_on_keys.iter().enumerate() {
            if holder(j, key, p).await?.is_some() {
                continue;
            }
            let n = match held.get_mut(&(key, p)) {
                Some(n) => n,
                None => {
                    let n = super::key_waits::waiting(j, key, p).await?;
                    held.entry((key, p)).or_insert(n)
                }
            };
            if *n >= i64::from(MAX_WAITS_PER_KEY) {
                return Ok(FlowInserted::TooManyWaits { task: i, key: k });
            }
            *n += 1;
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
                .filter_map(|&k| inserted.get(k).map(|r| r.task_id.clone())),
        );
        // Keys: a key that names a task is a dependency on it; one that names
        // none yet is a wait the insert of a task with that key binds.
        let mut remaining = 0i64;
        for k in &f.depends_on_keys {
            let holder = holder(j, k, f.producer.as_deref()).await?;
            sqlx::query(
                "INSERT INTO task_key_deps (task_id, queue, `key`, bound_to, producer) \
                 VALUES (?, ?, ?, ?, ?)",
            )
            .bind(&r.task_id)
            .bind(&k.queue)
            .bind(&k.key)
            .bind(&holder)
            .bind(&f.producer)
            .execute(j.conn())
            .await?;
            match holder {
                Some(id) => deps.push(id),
                None => remaining += 1,
            }
        }
        deps.sort_unstable();
        deps.dedup();
        let mut failed = false;
        for d in &deps {
            let state = state_of(j, d).await?.unwrap_or_default();
            let done = matches!(state.as_str(), "succeeded" | "dead" | "cancelled");
            remaining += i64::from(!done);
            failed |= matches!(state.as_str(), "dead" | "cancelled");
            sqlx::query(
                "INSERT IGNORE INTO task_deps (depends_on, task_id, resolved) VALUES (?, ?, ?)",
            )
            .bind(d)
            .bind(&r.task_id)
            .bind(done)
            .execute(j.conn())
            .await?;
            if !done {
                sqlx::query("UPDATE tasks SET has_dependents = TRUE WHERE id = ?")
                    .bind(d)
                    .execute(j.conn())
                    .await?;
            }
        }
        let state = if failed && !f.run_if_dependency_fails {
            "cancelled"
        } else if remaining > 0 {
            "blocked"
        } else {
            "pending"
        };
        let cancelled = state == "cancelled";
        sqlx::query(
            "UPDATE tasks SET state = ?, deps_remaining = ?, run_if_dependency_fails = ?, \
               retry_schedule = ?, cancel_reason = ?, \
               last_error = COALESCE(?, last_error), finished_at = COALESCE(?, finished_at) \
             WHERE id = ?",
        )
        .bind(state)
        .bind(remaining)
        .bind(f.run_if_dependency_fails)
        .bind(schedule_json(&f.retry_schedule))
        .bind(cancelled.then_some("dependency_failed"))
        .bind(cancelled.then_some("DEPENDENCY_FAILED"))
        .bind(cancelled.then_some(now))
        .bind(&r.task_id)
        .execute(j.conn())
        .await?;
        if state == "blocked" {
            for e in j.events.iter_mut() {
                if e.kind == EventKind::Submitted && e.task_id == r.task_id {
                    e.state = "blocked";
                }
            }
        } else if cancelled {
            let t = &tasks[i];
            j.push(Ev {
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
    Ok(FlowInserted::Done(inserted))
}

pub(super) async fn flow_info(
    r: &MySqlPool,
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
            "SELECT queue, `key` FROM task_key_deps WHERE task_id = ? ORDER BY queue, `key`",
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
    r: &MySqlPool,
    task_id: &str,
    after: i64,
    limit: u32,
) -> StoreResult<Vec<EventRecord>> {
    let rows: Vec<EventRow> = sqlx::query_as(
        "SELECT event_id, task_id, queue, kind, state, attempt, worker_id, `time`, detail \
         FROM task_events WHERE task_id = ? AND event_id > ? ORDER BY event_id LIMIT ?",
    )
    .bind(task_id)
    .bind(after)
    .bind(i64::from(limit))
    .fetch_all(r)
    .await?;
    rows.into_iter().map(event_record).collect()
}

/// Ids commit in order (`events.rs`): every committed event is final.
pub(super) async fn event_read(
    r: &MySqlPool,
    after: i64,
    limit: u32,
) -> StoreResult<Vec<EventRecord>> {
    let rows: Vec<EventRow> = sqlx::query_as(
        "SELECT event_id, task_id, queue, kind, state, attempt, worker_id, `time`, detail \
         FROM task_events WHERE event_id > ? ORDER BY event_id LIMIT ?",
    )
    .bind(after)
    .bind(i64::from(limit))
    .fetch_all(r)
    .await?;
    rows.into_iter().map(event_record).collect()
}

pub(super) async fn event_head(r: &MySqlPool) -> StoreResult<i64> {
    Ok(sqlx::query_scalar("SELECT n FROM event_seq WHERE id = 1")
        .fetch_one(r)
        .await?)
}

pub(super) async fn event_purge(
    r: &MySqlPool,
    before: DateTime<Utc>,
    limit: u32,
) -> StoreResult<u64> {
    // Ids grow with time: the oldest `limit` by id, those older than `before`.
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT event_id FROM task_events WHERE `time` < ? ORDER BY event_id LIMIT ?",
    )
    .bind(ms(before))
    .bind(i64::from(limit))
    .fetch_all(r)
    .await?;
    let Some(last) = ids.last() else {
        return Ok(0);
    };
    Ok(
        sqlx::query("DELETE FROM task_events WHERE event_id <= ? AND event_id >= ? AND `time` < ?")
            .bind(last)
            .bind(ids[0])
            .bind(ms(before))
            .execute(r)
            .await?
            .rows_affected(),
    )
}

pub(super) async fn dead_letters_set(j: &mut Job, pairs: &[(String, String)]) -> StoreResult<()> {
    sqlx::query("DELETE FROM queue_dead_letters")
        .execute(j.conn())
        .await?;
    for (q, dlq) in pairs {
        sqlx::query("INSERT INTO queue_dead_letters (queue, dead_letter_queue) VALUES (?, ?)")
            .bind(q)
            .bind(dlq)
            .execute(j.conn())
            .await?;
    }
    Ok(())
}

pub(super) async fn select(r: &MySqlPool, f: &BulkFilter) -> StoreResult<Vec<TaskRecord>> {
    let mut qb = sqlx::QueryBuilder::<MySql>::new(format!(
        "SELECT {TASK_COLUMNS} FROM tasks WHERE queue = "
    ));
    qb.push_bind(&f.queue);
    if let Some(p) = &f.key_prefix {
        qb.push(" AND LEFT(`key`, CHAR_LENGTH(")
            .push_bind(p)
            .push(")) = ")
            .push_bind(p);
    }
    if let Some(e) = &f.error_contains {
        qb.push(" AND INSTR(COALESCE(last_error, ''), ")
            .push_bind(e)
            .push(") > 0");
    }
    if let Some(t) = f.created_after {
        qb.push(" AND created_at >= ").push_bind(ms(t));
    }
    if let Some(t) = f.created_before {
        qb.push(" AND created_at < ").push_bind(ms(t));
    }
    if let Some(s) = &f.schedule_id {
        qb.push(" AND schedule_id = ").push_bind(s);
    }
    if let Some(s) = state_filter_sql(&f.states, &ms(f.now).to_string()) {
        qb.push(" AND ").push(s);
    }
    qb.push(" ORDER BY seq LIMIT ")
        .push_bind(i64::from(f.limit));
    qb.build_query_as::<TaskRow>()
        .fetch_all(r)
        .await?
        .into_iter()
        .map(TaskRow::into_record)
        .collect()
}

pub(super) async fn cancel_many(
    j: &mut Job,
    ids: &[String],
    now: DateTime<Utc>,
) -> StoreResult<BulkCancelled> {
    let now = ms(now);
    let mut out = BulkCancelled::default();
    for id in ids {
        let row: Option<(i64, String, String, i64, bool)> = sqlx::query_as(
            "SELECT seq, state, queue, attempt, cancel_requested FROM tasks WHERE id = ? \
             FOR UPDATE",
        )
        .bind(id)
        .fetch_optional(j.conn())
        .await?;
        let Some((seq, state, queue, attempt, requested)) = row else {
            continue;
        };
        if state == "pending" || state == "blocked" {
            sqlx::query(
                "UPDATE tasks SET state = 'cancelled', cancel_reason = 'operator', \
                   finished_at = ?, updated_at = ? WHERE seq = ?",
            )
            .bind(now)
            .bind(now)
            .bind(seq)
            .execute(j.conn())
            .await?;
            out.cancelled += 1;
            j.push(simple(
                id,
                &queue,
                EventKind::Cancelled,
                "cancelled",
                attempt,
                now,
            ));
        } else if state == "leased" && !requested {
            sqlx::query("UPDATE tasks SET cancel_requested = TRUE, updated_at = ? WHERE seq = ?")
                .bind(now)
                .bind(seq)
                .execute(j.conn())
                .await?;
            out.cancel_requested += 1;
            j.push(simple(
                id,
                &queue,
                EventKind::Updated,
                "leased",
                attempt,
                now,
            ));
        }
    }
    Ok(out)
}

pub(super) async fn requeue_many(
    j: &mut Job,
    tasks: &[(String, DateTime<Utc>)],
    now: DateTime<Utc>,
) -> StoreResult<u64> {
    let now = ms(now);
    let mut n = 0;
    for (id, run_at) in tasks {
        let row: Option<(i64, String, i64)> = sqlx::query_as(
            "SELECT seq, queue, attempt FROM tasks WHERE id = ? \
             AND state IN ('dead', 'cancelled') FOR UPDATE",
        )
        .bind(id)
        .fetch_optional(j.conn())
        .await?;
        let Some((seq, queue, attempt)) = row else {
            continue;
        };
        sqlx::query(
            "UPDATE tasks SET state = 'pending', run_at = ?, \
               attempts_allowed = attempt + max_attempts, cancel_requested = FALSE, \
               cancel_reason = NULL, finished_at = NULL, updated_at = ? WHERE seq = ?",
        )
        .bind(ms(*run_at))
        .bind(now)
        .bind(seq)
        .execute(j.conn())
        .await?;
        n += 1;
        let state = visible("pending", ms(*run_at), now);
        j.push(simple(id, &queue, EventKind::Requeued, state, attempt, now));
        j.woken.push(queue);
    }
    Ok(n)
}

/// See [`Store::task_keys_missing`].
pub(super) async fn keys_missing(
    r: &MySqlPool,
    task_id: &str,
    limit: u32,
) -> StoreResult<Vec<TaskKey>> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT queue, `key` FROM task_key_deps WHERE task_id = ? AND bound_to IS NULL \
         ORDER BY queue, `key` LIMIT ?",
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
    r: &MySqlPool,
    task_ids: &[String],
) -> StoreResult<Vec<(String, String, Vec<u8>)>> {
    let mut out = Vec::new();
    for piece in task_ids.chunks(500) {
        let mut qb = sqlx::QueryBuilder::<MySql>::new(
            "SELECT d.task_id, t.id, COALESCE(t.result, x'') FROM task_deps d \
             JOIN tasks t ON t.id = d.depends_on WHERE t.state = 'succeeded' AND d.task_id IN (",
        );
        let mut sep = qb.separated(", ");
        for id in piece {
            sep.push_bind(id);
        }
        qb.push(") ORDER BY d.task_id, t.id");
        out.extend(
            qb.build_query_as::<(String, String, Vec<u8>)>()
                .fetch_all(r)
                .await?,
        );
    }
    Ok(out)
}

/// See [`Store::task_dependency_result_sizes`].
pub(super) async fn dependency_result_sizes(
    r: &MySqlPool,
    task_ids: &[String],
) -> StoreResult<Vec<(String, u64, u64)>> {
    let mut out = Vec::new();
    for piece in task_ids.chunks(500) {
        let mut qb = sqlx::QueryBuilder::<MySql>::new(
            "SELECT d.task_id, CAST(count(*) AS SIGNED), \
               CAST(sum(length(t.id) + COALESCE(length(t.result), 0)) AS SIGNED) \
             FROM task_deps d JOIN tasks t ON t.id = d.depends_on \
             WHERE t.state = 'succeeded' AND d.task_id IN (",
        );
        let mut sep = qb.separated(", ");
        for id in piece {
            sep.push_bind(id);
        }
        qb.push(") GROUP BY d.task_id");
        out.extend(
            qb.build_query_as::<(String, i64, i64)>()
                .fetch_all(r)
                .await?
                .into_iter()
                .map(|(id, n, bytes)| (id, n.max(0) as u64, bytes.max(0) as u64)),
        );
    }
    Ok(out)
}
