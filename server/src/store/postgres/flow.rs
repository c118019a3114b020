//! Flow on Postgres: inserts with dependencies, the event log, bulk
//! operations. Every statement that makes a transition records its event
//! (store/postgres/events.rs). Resolving dependents and dead-letter notices
//! happen in the row triggers of migration 0010, whose WHEN clauses let only a
//! task with dependents (`has_dependents`) or a task going DEAD through, in the
//! transaction of whatever statement changed the task.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::super::flow::{dependency_ids, may_depend, schedule_json, with_flow};
use super::super::row::ms;
use super::super::*;
use super::{PostgresStore, sql};

fn finished(state: &str) -> bool {
    matches!(state, "succeeded" | "dead" | "cancelled")
}

/// The stored state of a new task and its flow columns.
struct Placed {
    id: String,
    state: &'static str,
    remaining: i64,
    run_if: bool,
    schedule: Option<String>,
}

pub(super) async fn insert(
    pool: &PgPool,
    tasks: &[NewTask],
    flows: &[FlowSpec],
    now: DateTime<Utc>,
    commit_by: Option<std::time::Instant>,
) -> StoreResult<FlowInserted> {
    let mut tx = pool.begin().await?;
    let keyed = flows.iter().any(|f| !f.depends_on_keys.is_empty());
    if keyed {
        // Before anything else (so no keyed insert of this batch holds the
        // shared form first): see the trigger of migration 0020.
        sqlx::query(sql::TASK_INSERT_FLOW_KEY_LOCK)
            .execute(&mut *tx)
            .await?;
    }
    let inserted = PostgresStore::insert_on(&mut tx, tasks, now, "").await?;
    let holders = if keyed {
        super::key_waits::key_holders(&mut tx, flows).await?
    } else {
        HashMap::new()
    };
    // A key held by a task the dependent's producer may not name is, for that
    // dependent, a key no task holds.
    let holder = |f: &FlowSpec, k: &TaskKey| -> Option<String> {
        holders
            .get(k)
            .filter(|(_, p)| may_depend(f.producer.as_deref(), p.as_deref()))
            .map(|(id, _)| id.clone())
    };
    // Each new task's dependencies, as ids (keys that name a task included).
    let deps: Vec<Vec<String>> = flows
        .iter()
        .map(|f| {
            let mut d = dependency_ids(f, &inserted);
            d.extend(f.depends_on_keys.iter().filter_map(|k| holder(f, k)));
            d
        })
        .collect();
    // (dependency, producer its dependent may name: '' for any).
    let mut wanted: Vec<(&str, &str)> = flows
        .iter()
        .zip(&deps)
        .flat_map(|(f, d)| {
            let p = f.producer.as_deref().unwrap_or("");
            d.iter().map(move |id| (id.as_str(), p))
        })
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    let (wanted_ids, wanted_by): (Vec<&str>, Vec<&str>) = wanted.into_iter().unzip();
    // Locked (in id order) and marked so none can finish until this transaction
    // ends, and each that finishes later runs the dependents trigger and sees
    // the edges written here; another producer's task is neither.
    let found: Vec<(String, String, Option<String>)> =
        sqlx::query_as(sql::TASK_INSERT_FLOW_DEPENDENCIES)
            .bind(&wanted_ids)
            .bind(&wanted_by)
            .fetch_all(&mut *tx)
            .await?;
    let owners: HashMap<&str, Option<&str>> = found
        .iter()
        .map(|(id, _, p)| (id.as_str(), p.as_deref()))
        .collect();
    for (i, f) in flows.iter().enumerate() {
        let named = |d: &String| {
            owners
                .get(d.as_str())
                .is_some_and(|&p| may_depend(f.producer.as_deref(), p))
        };
        if let Some(j) = f.depends_on.iter().position(|d| !named(d)) {
            tx.rollback().await?;
            return Ok(FlowInserted::UnknownDependency { task: i, dep: j });
        }
    }
    let states: HashMap<&str, &str> = found
        .iter()
        .map(|(id, st, _)| (id.as_str(), st.as_str()))
        .collect();
    // Waits past the cap refuse the call.
    let mut new_waits = Vec::new();
    for (i, f) in flows.iter().enumerate() {
        if inserted.get(i).is_none_or(|r| r.deduplicated) || f.is_plain() {
            continue;
        }
        for (j, k) in f.depends_on_keys.iter().enumerate() {
            if holder(f, k).is_none() {
                new_waits.push((i, j, k, f.producer.as_deref()));
            }
        }
    }
    if !new_waits.is_empty()
        && let Some((task, key)) = super::key_waits::over_wait_cap(&mut tx, &new_waits).await?
    {
        tx.rollback().await?;
        return Ok(FlowInserted::TooManyWaits { task, key });
    }
    let mut placed = Vec::new();
    let mut edges: (Vec<String>, Vec<String>, Vec<bool>) = Default::default();
    #[allow(clippy::type_complexity)]
    let mut waits: (
        Vec<String>,
        Vec<String>,
        Vec<String>,
        Vec<Option<String>>,
        Vec<Option<String>>,
    ) = Default::default();
    for (i, f, r) in with_flow(flows, &inserted) {
        let mut mine: Vec<&String> = deps[i].iter().collect();
        mine.sort_unstable();
        mine.dedup();
        let mut remaining = 0;
        for k in &f.depends_on_keys {
            let holder = holder(f, k);
            // A key no task holds yet: a wait the insert of its task binds.
            remaining += i64::from(holder.is_none());
            waits.0.push(r.task_id.clone());
            waits.1.push(k.queue.clone());
            waits.2.push(k.key.clone());
            waits.3.push(holder);
            waits.4.push(f.producer.clone());
        }
        let mut failed = false;
        for d in mine {
            let state = states.get(d.as_str()).copied().unwrap_or("pending");
            let done = finished(state);
            remaining += i64::from(!done);
            failed |= matches!(state, "dead" | "cancelled");
            edges.0.push(d.clone());
            edges.1.push(r.task_id.clone());
            edges.2.push(done);
        }
        let state = super::super::flow::inserted_state(failed, f, remaining);
        placed.push(Placed {
            id: r.task_id.clone(),
            state,
            remaining,
            run_if: f.run_if_dependency_fails,
            schedule: schedule_json(&f.retry_schedule),
        });
    }
    // Edges first: a dependency in this batch that is cancelled below then
    // cancels its dependents through the trigger, like any other.
    sqlx::query(sql::TASK_INSERT_FLOW_EDGES)
        .bind(&edges.0)
        .bind(&edges.1)
        .bind(&edges.2)
        .execute(&mut *tx)
        .await?;
    if !waits.0.is_empty() {
        sqlx::query(sql::TASK_INSERT_FLOW_KEY_WAITS)
            .bind(&waits.0)
            .bind(&waits.1)
            .bind(&waits.2)
            .bind(&waits.3)
            .bind(&waits.4)
            .execute(&mut *tx)
            .await?;
    }
    let ids: Vec<&str> = placed.iter().map(|p| p.id.as_str()).collect();
    let st: Vec<&str> = placed.iter().map(|p| p.state).collect();
    let rem: Vec<i64> = placed.iter().map(|p| p.remaining).collect();
    let run_if: Vec<bool> = placed.iter().map(|p| p.run_if).collect();
    let sched: Vec<Option<&str>> = placed.iter().map(|p| p.schedule.as_deref()).collect();
    // A blocked task was submitted BLOCKED: its SUBMITTED event says so; one
    // whose dependency failed already is CANCELLED at once (an event too), in
    // the same statement, before the dependents trigger tells its own dependents.
    sqlx::query(sql::TASK_INSERT_FLOW_STATE)
        .bind(&ids)
        .bind(&st)
        .bind(&rem)
        .bind(&run_if)
        .bind(&sched)
        .bind(ms(now))
        .execute(&mut *tx)
        .await?;
    if commit_by.is_some_and(|d| std::time::Instant::now() >= d) {
        tx.rollback().await?;
        return Ok(FlowInserted::DeadlinePassed);
    }
    tx.commit().await?;
    Ok(FlowInserted::Done(inserted))
}

#[async_trait]
impl Flow for PostgresStore {
    async fn task_flow_info(
        &self,
        task_ids: &[String],
    ) -> StoreResult<std::collections::HashMap<String, TaskFlowInfo>> {
        /// id, deps_remaining, run_if_dependency_fails, cancel_reason, depends_on.
        type InfoRow = (String, i64, bool, Option<String>, Vec<String>);
        let rows: Vec<InfoRow> = sqlx::query_as(sql::TASK_FLOW_INFO)
            .bind(task_ids)
            .fetch_all(&self.pool)
            .await?;
        let mut keys: HashMap<String, Vec<TaskKey>> = HashMap::new();
        let key_rows: Vec<(String, String, String)> = sqlx::query_as(sql::TASK_FLOW_INFO_KEYS)
            .bind(task_ids)
            .fetch_all(&self.pool)
            .await?;
        for (id, queue, key) in key_rows {
            keys.entry(id).or_default().push(TaskKey { queue, key });
        }
        Ok(rows
            .into_iter()
            .map(|(id, rem, run_if, reason, deps)| {
                let info = TaskFlowInfo {
                    depends_on_keys: keys.remove(&id).unwrap_or_default(),
                    depends_on: deps,
                    deps_remaining: u32::try_from(rem.max(0)).unwrap_or(u32::MAX),
                    run_if_dependency_fails: run_if,
                    cancel_reason: reason,
                };
                (id, info)
            })
            .collect())
    }

    /// See [`Store::task_keys_missing`].
    async fn task_keys_missing(&self, task_id: &str, limit: u32) -> StoreResult<Vec<TaskKey>> {
        super::super::flow::keys_missing(&self.pool, sql::TASK_KEYS_MISSING, task_id, limit).await
    }

    /// See [`Store::task_dependency_result_sizes`].
    async fn task_dependency_result_sizes(
        &self,
        task_ids: &[String],
    ) -> StoreResult<Vec<(String, u64, u64)>> {
        let rows: Vec<(String, i64, i64)> = sqlx::query_as(sql::TASK_DEPENDENCY_RESULT_SIZES)
            .bind(task_ids)
            .fetch_all(&self.pool)
            .await?;
        Ok(super::super::flow::result_sizes(rows))
    }

    /// See [`Store::task_dependency_results`].
    async fn task_dependency_results(
        &self,
        task_ids: &[String],
    ) -> StoreResult<Vec<(String, String, Vec<u8>)>> {
        Ok(sqlx::query_as(sql::TASK_DEPENDENCY_RESULTS)
            .bind(task_ids)
            .fetch_all(&self.pool)
            .await?)
    }

    async fn task_deps_unfinished(&self, task_id: &str, limit: u32) -> StoreResult<Vec<String>> {
        let statement = sql::TASK_DEPS_UNFINISHED;
        super::super::flow::deps_unfinished(&self.pool, statement, task_id, limit).await
    }
}
