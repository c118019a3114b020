//! Flow on MySQL: what a task's dependencies are, and the dependency writes
//! of an insert with dependencies (`Tasks::task_insert_flow`). What follows a
//! task's end (dependents, dead letters) is in `events.rs`.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::super::flow::{
    dependency_failed, dependency_ids, may_depend, producer_in, schedule_json, with_flow,
};
use super::super::row::ms;
use super::super::*;
use super::{Job, MysqlStore, sql};
use crate::domain::event::EventKind;

super::super::flow::flow_reads!(MysqlStore, pool);

/// A dependency's state, its row locked until the job ends: a dependency
/// cannot finish unseen between this read and the commit (its finishing job
/// waits, then sees the new edge). An exclusive lock, as the row is marked
/// `has_dependents` next (a shared one would have to be upgraded, and two
/// inserts upgrading at once deadlock).
async fn state_of(j: &mut Job, id: &str) -> StoreResult<Option<String>> {
    Ok(sqlx::query_scalar(sql::TASK_INSERT_FLOW_DEP_LOCK)
        .bind(id)
        .fetch_optional(j.conn())
        .await?)
}

/// Whether a dependent of `producer` may name the task `id` (it exists and,
/// with a producer, is that producer's).
async fn may_name(j: &mut Job, id: &str, producer: Option<&str>) -> StoreResult<bool> {
    let metadata: Option<String> = sqlx::query_scalar(sql::TASK_INSERT_FLOW_DEP_METADATA)
        .bind(id)
        .fetch_optional(j.conn())
        .await?;
    Ok(metadata.is_some_and(|m| may_depend(producer, producer_in(&m).as_deref())))
}

/// The task holding `key` that a dependent of `producer` may name: a key held
/// by another producer's task is, for that dependent, a key no task holds.
async fn holder(j: &mut Job, key: &TaskKey, producer: Option<&str>) -> StoreResult<Option<String>> {
    let row: Option<(String, String)> = sqlx::query_as(sql::KEY_WAITS_HOLDERS)
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
        sqlx::query(sql::TASK_INSERT_FLOW_KEYS_LOCK)
            .fetch_optional(j.conn())
            .await?;
    }
    // First the tasks: a dependency may name one of this batch.
    let inserted = super::rows::insert_many(j, tasks, now).await?;
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
    for (i, f, r) in with_flow(flows, &inserted) {
        let mut deps = dependency_ids(f, &inserted);
        // Keys: a key that names a task is a dependency on it; one that names
        // none yet is a wait the insert of a task with that key binds.
        let mut remaining = 0i64;
        for k in &f.depends_on_keys {
            let holder = holder(j, k, f.producer.as_deref()).await?;
            sqlx::query(sql::TASK_INSERT_FLOW_KEY_WAITS)
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
            sqlx::query(sql::TASK_INSERT_FLOW_EDGES)
                .bind(d)
                .bind(&r.task_id)
                .bind(done)
                .execute(j.conn())
                .await?;
            if !done {
                sqlx::query(sql::TASK_INSERT_FLOW_HAS_DEPENDENTS)
                    .bind(d)
                    .execute(j.conn())
                    .await?;
            }
        }
        let state = super::super::flow::inserted_state(failed, f, remaining);
        let cancelled = state == "cancelled";
        sqlx::query(sql::TASK_INSERT_FLOW_STATE)
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
            j.push(dependency_failed(&r.task_id, &t.queue, 0, now));
        }
    }
    Ok(FlowInserted::Done(inserted))
}
