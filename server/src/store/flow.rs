//! Flow store types: dependencies, the event log, bulk selections.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::domain::TaskState;
use crate::domain::event::EventKind;

use super::Inserted;
pub use crate::domain::model::FlowSpec;

#[allow(unused_imports)]
use super::*;
use async_trait::async_trait;

/// The outcome of an insert with flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowInserted {
    Done(Vec<Inserted>),
    /// `tasks[task].depends_on[dep]` names no task; nothing was inserted.
    UnknownDependency {
        task: usize,
        dep: usize,
    },
    /// The caller's commit-by instant passed before the commit; nothing was
    /// inserted.
    DeadlinePassed,
    /// `tasks[task].depends_on_keys[key]` would be a wait past
    /// [`MAX_WAITS_PER_KEY`] for its key; nothing was inserted.
    TooManyWaits {
        task: usize,
        key: usize,
    },
}

/// Unbound waits (depends_on_keys that no task holds yet) one key may have per
/// producer: (queue, key, producer), producer-less waits counted apart. A
/// Submit that would add one more is refused and stores nothing.
pub const MAX_WAITS_PER_KEY: u32 = 1000;

/// The producer recorded in a task's stored metadata (a JSON object).
pub(crate) fn producer_in(metadata: &str) -> Option<String> {
    let m: std::collections::BTreeMap<String, String> = serde_json::from_str(metadata).ok()?;
    m.get(crate::domain::task::PRODUCER_KEY).cloned()
}

/// Whether the run of a schedule whose task is `first` may name the task
/// holding its key (`holder_metadata`, its stored metadata): always when
/// `first` has no producer, else only a task of the same producer.
pub(crate) fn run_may_name(first: &super::NewTask, holder_metadata: Option<&str>) -> bool {
    match first.metadata.get(crate::domain::task::PRODUCER_KEY) {
        None => true,
        Some(p) => holder_metadata.is_some_and(|m| producer_in(m).as_ref() == Some(p)),
    }
}

/// Whether a dependent submitted by `waiter` may depend on a task of
/// `holder`: always without a producer, else only on the same producer's.
pub(crate) fn may_depend(waiter: Option<&str>, holder: Option<&str>) -> bool {
    waiter.is_none_or(|w| holder == Some(w))
}

/// The flow side of one task, for the admin view.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskFlowInfo {
    pub depends_on: Vec<String>,
    /// TaskSpec.depends_on_keys as submitted, in (queue, key) order.
    pub depends_on_keys: Vec<crate::domain::model::TaskKey>,
    pub deps_remaining: u32,
    pub run_if_dependency_fails: bool,
    /// "operator" or "dependency_failed" when cancelled.
    pub cancel_reason: Option<String>,
}

/// Which tasks a bulk operation acts on (oldest first, up to `limit`).
#[derive(Debug, Clone, Default)]
pub struct BulkFilter {
    pub queue: String,
    pub states: Vec<TaskState>,
    pub key_prefix: Option<String>,
    pub error_contains: Option<String>,
    pub created_after: Option<DateTime<Utc>>,
    pub created_before: Option<DateTime<Utc>>,
    pub schedule_id: Option<String>,
    pub limit: u32,
    pub now: DateTime<Utc>,
}

/// What a bulk cancel did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BulkCancelled {
    pub cancelled: u64,
    pub cancel_requested: u64,
}

/// The keys a task depends on that no task holds yet, up to `limit`: one read,
/// the same for every sqlx database.
pub(crate) async fn keys_missing<DB>(
    pool: &sqlx::Pool<DB>,
    statement: &'static str,
    task_id: &str,
    limit: u32,
) -> StoreResult<Vec<TaskKey>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB>,
    str: sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB>,
    i64: sqlx::Type<DB>,
    for<'r> (String, String): sqlx::FromRow<'r, DB::Row>,
{
    let rows: Vec<(String, String)> = sqlx::query_as(statement)
        .bind(task_id)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(queue, key)| TaskKey { queue, key })
        .collect())
}

/// A task's dependencies not finished yet, up to `limit`: one read, the same
/// for every sqlx database.
pub(crate) async fn deps_unfinished<DB>(
    pool: &sqlx::Pool<DB>,
    statement: &'static str,
    task_id: &str,
    limit: u32,
) -> StoreResult<Vec<String>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB>,
    str: sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB>,
    i64: sqlx::Type<DB>,
    for<'r> (String,): sqlx::FromRow<'r, DB::Row>,
{
    let rows: Vec<(String,)> = sqlx::query_as(statement)
        .bind(task_id)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// `Flow::task_dependency_result_sizes` as read (counts and bytes, signed).
pub(crate) fn result_sizes(rows: Vec<(String, i64, i64)>) -> Vec<(String, u64, u64)> {
    rows.into_iter()
        .map(|(id, n, bytes)| (id, n.max(0) as u64, bytes.max(0) as u64))
        .collect()
}

/// `Flow::task_flow_info` on a database that reads it with three statements,
/// each taking the task id as its one parameter: the task's dependency state,
/// its dependencies by id, its dependencies by key (SQLite, MySQL; Postgres
/// reads it in one statement).
pub(crate) async fn flow_info_by_task<DB>(
    pool: &sqlx::Pool<DB>,
    task_ids: &[String],
    statements: [&'static str; 3],
) -> StoreResult<std::collections::HashMap<String, TaskFlowInfo>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> &'q String: sqlx::Encode<'q, DB>,
    String: sqlx::Type<DB>,
    for<'r> (i64, bool, Option<String>): sqlx::FromRow<'r, DB::Row>,
    for<'r> (String,): sqlx::FromRow<'r, DB::Row>,
    for<'r> (String, String): sqlx::FromRow<'r, DB::Row>,
{
    let [task, deps, keys] = statements;
    let mut out = std::collections::HashMap::with_capacity(task_ids.len());
    for id in task_ids {
        let row: Option<(i64, bool, Option<String>)> =
            sqlx::query_as(task).bind(id).fetch_optional(pool).await?;
        let Some((remaining, run_if, reason)) = row else {
            continue;
        };
        let deps: Vec<(String,)> = sqlx::query_as(deps).bind(id).fetch_all(pool).await?;
        let keys: Vec<(String, String)> = sqlx::query_as(keys).bind(id).fetch_all(pool).await?;
        out.insert(
            id.clone(),
            TaskFlowInfo {
                depends_on: deps.into_iter().map(|(d,)| d).collect(),
                depends_on_keys: keys
                    .into_iter()
                    .map(|(queue, key)| super::TaskKey { queue, key })
                    .collect(),
                deps_remaining: u32::try_from(remaining.max(0)).unwrap_or(u32::MAX),
                run_if_dependency_fails: run_if,
                cancel_reason: reason,
            },
        );
    }
    Ok(out)
}

/// RetryPolicy.schedule as stored (`tasks.retry_schedule`): a JSON array of ms.
pub(crate) fn schedule_json(s: &[Duration]) -> Option<String> {
    if s.is_empty() {
        return None;
    }
    let ms: Vec<i64> = s.iter().map(|d| super::row::duration_ms(*d)).collect();
    serde_json::to_string(&ms).ok()
}

/// One event to record, as the statement that makes the transition knows it
/// (store/postgres/events.rs and store/sqlite/events.rs write it in the same
/// transaction).
#[derive(Debug, Clone)]
pub(crate) struct Ev<'a> {
    pub task_id: &'a str,
    pub queue: &'a str,
    pub kind: EventKind,
    /// The visible state after the transition ([`visible`]).
    pub state: &'static str,
    pub attempt: i64,
    pub worker: Option<&'a str>,
    /// ms since the epoch.
    pub time: i64,
    pub detail: Option<&'a str>,
}

/// An event waiting for the end of its job: an [`Ev`] that owns its text
/// (SQLite and MySQL write a job's events when it ends).
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

impl From<Ev<'_>> for Pending {
    fn from(e: Ev<'_>) -> Self {
        Pending {
            task_id: e.task_id.to_owned(),
            queue: e.queue.to_owned(),
            kind: e.kind,
            state: e.state,
            attempt: e.attempt,
            worker: e.worker.map(str::to_owned),
            time: e.time,
            detail: e.detail.map(str::to_owned),
        }
    }
}

/// The state a task inserted with dependencies takes: CANCELLED when one
/// failed and it does not run anyway, BLOCKED while `remaining` are
/// unfinished, else pending.
pub(crate) fn inserted_state(failed: bool, f: &FlowSpec, remaining: i64) -> &'static str {
    if failed && !f.run_if_dependency_fails {
        "cancelled"
    } else if remaining > 0 {
        "blocked"
    } else {
        "pending"
    }
}

/// An event with no worker and no detail.
pub(crate) fn simple<'a>(
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

/// The UNBLOCKED event of a task whose last dependency finished: pending
/// again at `at` (ms), due at `run_at`.
pub(crate) fn unblocked<'a>(
    task_id: &'a str,
    queue: &'a str,
    run_at: i64,
    attempt: i64,
    at: i64,
) -> Ev<'a> {
    simple(
        task_id,
        queue,
        EventKind::Unblocked,
        visible("pending", run_at, at),
        attempt,
        at,
    )
}

/// The state a finishing event leaves its task in, which its dependents
/// resolve on: None for an event that finishes nothing.
pub(crate) fn finished_state(kind: EventKind) -> Option<&'static str> {
    match kind {
        EventKind::Succeeded => Some("succeeded"),
        EventKind::Dead => Some("dead"),
        EventKind::Cancelled => Some("cancelled"),
        _ => None,
    }
}

/// The CANCELLED (DEPENDENCY_FAILED) event of a task a failed dependency cancels.
pub(crate) fn dependency_failed<'a>(
    task_id: &'a str,
    queue: &'a str,
    attempt: i64,
    at: i64,
) -> Ev<'a> {
    Ev {
        detail: Some("DEPENDENCY_FAILED"),
        ..simple(
            task_id,
            queue,
            EventKind::Cancelled,
            "cancelled",
            attempt,
            at,
        )
    }
}

/// The tasks of an inserted batch that have flow to write, with their index:
/// each inserted anew (not a duplicate of a key) whose spec is not plain.
pub(crate) fn with_flow<'a>(
    flows: &'a [FlowSpec],
    inserted: &'a [Inserted],
) -> impl Iterator<Item = (usize, &'a FlowSpec, &'a Inserted)> {
    flows.iter().enumerate().filter_map(|(i, f)| {
        let r = inserted.get(i).filter(|r| !r.deduplicated)?;
        (!f.is_plain()).then_some((i, f, r))
    })
}

/// The ids a new task depends on by id: its `depends_on`, and the tasks of its
/// batch that `depends_on_index` names, as `inserted` (the batch's answers) has them.
pub(crate) fn dependency_ids(f: &FlowSpec, inserted: &[Inserted]) -> Vec<String> {
    let mut deps = f.depends_on.clone();
    deps.extend(
        f.depends_on_index
            .iter()
            .filter_map(|&j| inserted.get(j).map(|r| r.task_id.clone())),
    );
    deps
}

/// The visible state of a stored state at `at` (ms): pending is scheduled or ready.
pub(crate) fn visible(state: &str, run_at: i64, at: i64) -> &'static str {
    match state {
        "pending" if run_at > at => "scheduled",
        "pending" => "ready",
        "leased" => "leased",
        "succeeded" => "succeeded",
        "dead" => "dead",
        "cancelled" => "cancelled",
        "blocked" => "blocked",
        _ => "ready",
    }
}

/// The events of an attempt that ended without success (Fail, an expired lease,
/// a deadline): the failure itself (HEARTBEAT_LOST when the lease had expired),
/// then what follows (RETRY_SCHEDULED, DEAD or CANCELLED).
pub(crate) fn failure_events<'a>(
    row: &'a super::row::TaskRow,
    new_state: &str,
    run_at: i64,
    error: &'a str,
    now: i64,
) -> Vec<Ev<'a>> {
    let state = visible(new_state, run_at, now);
    let mut out = Vec::with_capacity(2);
    if row.state == "leased" {
        let lost = row.lease_expires_at.is_some_and(|e| e <= now);
        out.push(Ev {
            task_id: &row.id,
            queue: &row.queue,
            kind: if lost {
                EventKind::HeartbeatLost
            } else {
                EventKind::Failed
            },
            state,
            attempt: row.attempt,
            worker: row.leased_by.as_deref(),
            time: now,
            detail: Some(error),
        });
    }
    let (kind, detail) = match new_state {
        "pending" if row.state == "leased" => (EventKind::RetryScheduled, None),
        "pending" => (EventKind::Requeued, None),
        "dead" => (EventKind::Dead, Some(error)),
        _ => (EventKind::Cancelled, None),
    };
    out.push(Ev {
        task_id: &row.id,
        queue: &row.queue,
        kind,
        state,
        attempt: row.attempt,
        worker: None,
        time: now,
        detail,
    });
    out
}

/// The SUCCEEDED event of a leased row its worker completes at `now` (ms).
pub(crate) fn succeeded(row: &super::row::TaskRow, now: i64) -> Ev<'_> {
    Ev {
        state: "succeeded",
        ..of_row(row, EventKind::Succeeded, now)
    }
}

/// The event `kind` of a task row as it is after the transition, at `now` (ms).
pub(crate) fn of_row(row: &super::row::TaskRow, kind: EventKind, now: i64) -> Ev<'_> {
    let worker = matches!(
        kind,
        EventKind::Leased | EventKind::Succeeded | EventKind::Checkpointed
    )
    .then_some(row.leased_by.as_deref())
    .flatten();
    let detail = match kind {
        EventKind::Dead => row.last_error.as_deref(),
        // A dependency cancellation writes this error (and cancel_reason).
        EventKind::Cancelled if row.last_error.as_deref() == Some("DEPENDENCY_FAILED") => {
            Some("DEPENDENCY_FAILED")
        }
        _ => None,
    };
    Ev {
        task_id: &row.id,
        queue: &row.queue,
        kind,
        state: visible(&row.state, row.run_at, now),
        attempt: row.attempt,
        worker,
        time: now,
        detail,
    }
}

/// Dependencies as a lease and ExplainTask read them: what a task waits for, and the
/// results its finished dependencies pass down.
#[async_trait]
pub trait Flow: Send + Sync + 'static {
    /// The dependencies and cancel reason of each named task that exists.
    async fn task_flow_info(
        &self,
        task_ids: &[String],
    ) -> StoreResult<std::collections::HashMap<String, TaskFlowInfo>>;

    /// The dependencies of a task that have not finished yet, by id, up to
    /// `limit` (ExplainTask's BLOCKED_BY_DEPENDENCY gate).
    async fn task_deps_unfinished(&self, task_id: &str, limit: u32) -> StoreResult<Vec<String>>;

    /// The depends_on_keys of a task that no task has yet, up to `limit`, in
    /// (queue, key) order (ExplainTask's BLOCKED_BY_DEPENDENCY gate).
    async fn task_keys_missing(&self, task_id: &str, limit: u32) -> StoreResult<Vec<TaskKey>>;

    /// What the results of the SUCCEEDED dependencies of each of `task_ids`
    /// come to: (dependent, how many, their bytes with the dependencies' ids),
    /// for the dependents that have any. A lease asks this only for the tasks it
    /// leased that were submitted with dependencies, then reads the results of
    /// those whose results fit its reply ([`Store::task_dependency_results`]).
    async fn task_dependency_result_sizes(
        &self,
        task_ids: &[String],
    ) -> StoreResult<Vec<(String, u64, u64)>>;

    /// The results of the SUCCEEDED dependencies of `task_ids`: (dependent,
    /// dependency, result), ordered by dependent then dependency.
    async fn task_dependency_results(
        &self,
        task_ids: &[String],
    ) -> StoreResult<Vec<(String, String, Vec<u8>)>>;
}

/// `impl Flow` for a store whose flow reads are all shared ones over one sqlx
/// pool with `?` placeholders (SQLite's reader, MySQL's pool), the id lists
/// read in pieces by `by_id_list`: `flow_reads!(Store, pool_field)`, in a
/// backend module whose `sql` holds the statements. Postgres binds arrays
/// and reads its flow info in one statement, so it has its own.
macro_rules! flow_reads {
    ($store:ty, $pool:ident) => {
        const _: () = {
            use std::collections::HashMap;

            use async_trait::async_trait;

            use $crate::store::flow::{
                deps_unfinished, flow_info_by_task, keys_missing, result_sizes,
            };
            use $crate::store::tasks::by_id_list;
            use $crate::store::{Flow, StoreResult, TaskFlowInfo, TaskKey};

            #[async_trait]
            impl Flow for $store {
                async fn task_flow_info(
                    &self,
                    task_ids: &[String],
                ) -> StoreResult<HashMap<String, TaskFlowInfo>> {
                    let statements = [
                        sql::TASK_FLOW_INFO_TASK,
                        sql::TASK_FLOW_INFO_DEPS,
                        sql::TASK_FLOW_INFO_KEYS,
                    ];
                    flow_info_by_task(&self.$pool, task_ids, statements).await
                }

                async fn task_keys_missing(
                    &self,
                    task_id: &str,
                    limit: u32,
                ) -> StoreResult<Vec<TaskKey>> {
                    keys_missing(&self.$pool, sql::TASK_KEYS_MISSING, task_id, limit).await
                }

                async fn task_dependency_result_sizes(
                    &self,
                    task_ids: &[String],
                ) -> StoreResult<Vec<(String, u64, u64)>> {
                    let rows = by_id_list(&self.$pool, sql::TASK_DEPENDENCY_RESULT_SIZES, task_ids)
                        .await?;
                    Ok(result_sizes(rows))
                }

                async fn task_dependency_results(
                    &self,
                    task_ids: &[String],
                ) -> StoreResult<Vec<(String, String, Vec<u8>)>> {
                    by_id_list(&self.$pool, sql::TASK_DEPENDENCY_RESULTS, task_ids).await
                }

                async fn task_deps_unfinished(
                    &self,
                    task_id: &str,
                    limit: u32,
                ) -> StoreResult<Vec<String>> {
                    let statement = sql::TASK_DEPS_UNFINISHED;
                    deps_unfinished(&self.$pool, statement, task_id, limit).await
                }
            }
        };
    };
}
pub(crate) use flow_reads;
