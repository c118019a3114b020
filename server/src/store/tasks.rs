//! Submitting tasks and reading them back.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::row::IntoRecord;
use super::*;

/// Submitting tasks and reading them back: inserts (plain, with dependencies, matched
/// to a waiting lease), REPLACE_WAITING, a task by id or key, lists, attempts.
#[async_trait]
pub trait Tasks: Send + Sync + 'static {
    /// Inserts tasks in one transaction, in order. A task whose (queue, key) exists
    /// already (or earlier in the same batch) is not inserted; the existing id is returned.
    async fn task_insert_many(
        &self,
        tasks: &[NewTask],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<Inserted>>;

    async fn task_get(&self, task_id: &str) -> StoreResult<Option<TaskRecord>>;

    /// The tasks that hold any of these `(queue, key)` pairs.
    async fn task_find_keys(&self, keys: &[(String, String)]) -> StoreResult<Vec<TaskRecord>>;

    /// The queue of each named task that exists, by task id.
    async fn task_queues(
        &self,
        task_ids: &[String],
    ) -> StoreResult<std::collections::HashMap<String, String>>;

    async fn task_list(&self, filter: &TaskFilter) -> StoreResult<Vec<TaskRecord>>;

    /// Changes a task that is not leased and not succeeded.
    async fn task_update(
        &self,
        task_id: &str,
        update: &TaskUpdate,
        now: DateTime<Utc>,
    ) -> StoreResult<Changed>;

    /// REPLACE_WAITING: writes `r`'s payload, run_at, priority and metadata over
    /// the task holding (`r.queue`, `r.key`) if it waits (pending or blocked),
    /// with a `replaced` event, in one transaction that holds the row: a task a
    /// lease took, or one finished, is never changed. Answers the task's id when
    /// it was replaced, `None` otherwise (no such task, or not waiting).
    async fn task_replace_waiting(
        &self,
        r: &Replacement,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<String>>;

    /// Every attempt, oldest first; `None` when the task does not exist.
    async fn attempt_list(&self, task_id: &str) -> StoreResult<Option<Vec<AttemptRecord>>>;

    /// Inserts tasks as `task_insert_many` does, in one transaction, with their
    /// dependencies: a task with unfinished dependencies is BLOCKED; one whose
    /// dependency already failed is CANCELLED (DEPENDENCY_FAILED) unless it runs
    /// anyway. Dependencies are locked while they are read, so none can finish
    /// unseen. An unknown dependency id inserts nothing. When `commit_by` has
    /// passed once every statement ran, the transaction rolls back and nothing
    /// is inserted ([`FlowInserted::DeadlinePassed`]).
    async fn task_insert_flow(
        &self,
        tasks: &[NewTask],
        flows: &[FlowSpec],
        now: DateTime<Utc>,
        commit_by: Option<std::time::Instant>,
    ) -> StoreResult<FlowInserted>;

    /// Inserts tasks as `task_insert_many` does (one transaction, in order,
    /// deduplicated by key), except that a task matched to a waiting request
    /// (`matches[i]`; missing entries are `None`) is inserted already leased to
    /// it, as `task_lease_available` would lease it (attempt 1, a new lease and
    /// fencing token), if the match stands: see
    /// [`sync_match::matches_in_lease_order`], and no pending task of its queue
    /// that is due at `now` has a priority as high or higher, judged in the same
    /// transaction as the insert. Otherwise it is inserted pending (and its queue
    /// notified). One answer per task, in order.
    async fn task_insert_matched(
        &self,
        tasks: &[NewTask],
        matches: &[Option<MatchTo>],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<MatchedInsert>>;
}

/// The columns an operator's update writes over `row` (the same on every
/// database): what `u` names, else what the row holds; the attempts allowed
/// move with `max_attempts` (a routing reservation's extra attempt is kept).
pub(crate) struct UpdateValues {
    pub run_at: i64,
    pub priority: i64,
    pub deadline: Option<i64>,
    pub max_attempts: i64,
    pub attempts_allowed: i64,
    /// The routing target columns: the worker id and the labels as a JSON object.
    pub target_worker: Option<String>,
    pub target_labels: Option<String>,
}

impl UpdateValues {
    pub(crate) fn of(row: &row::TaskRow, u: &TaskUpdate) -> Self {
        let max_attempts = u.max_attempts.map(i64::from).unwrap_or(row.max_attempts);
        UpdateValues {
            run_at: u.run_at.map(row::ms).unwrap_or(row.run_at),
            priority: u.priority.map(i64::from).unwrap_or(row.priority),
            deadline: u.deadline.map(|d| d.map(row::ms)).unwrap_or(row.deadline),
            max_attempts,
            attempts_allowed: row.attempts_allowed - row.max_attempts + max_attempts,
            target_worker: match &u.target {
                Some(t) => t.worker_id.clone(),
                None => row.target_worker.clone(),
            },
            target_labels: match &u.target {
                Some(t) => (!t.labels.is_empty())
                    .then(|| serde_json::to_string(&t.labels).unwrap_or_else(|_| "{}".into())),
                None => row.target_labels.clone(),
            },
        }
    }
}

impl UpdateValues {
    /// What the update changes, old and new, for its `updated` event's detail:
    /// `priority 0 -> 5; target any -> worker w2`, the fields that differ from
    /// `row` in a fixed order (run_at, priority, deadline, max_attempts, target).
    pub(crate) fn changes(&self, row: &row::TaskRow) -> String {
        let time = |ms: Option<i64>| match ms.and_then(chrono::DateTime::from_timestamp_millis) {
            Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            None => "none".to_string(),
        };
        let target = |worker: &Option<String>, labels: &Option<String>| {
            let mut parts = Vec::new();
            if let Some(w) = worker {
                parts.push(format!("worker {w}"));
            }
            if let Some(l) = labels {
                parts.push(format!("labels {l}"));
            }
            if parts.is_empty() {
                "any".to_string()
            } else {
                parts.join(" ")
            }
        };
        let mut out = Vec::new();
        if self.run_at != row.run_at {
            out.push(format!(
                "run_at {} -> {}",
                time(Some(row.run_at)),
                time(Some(self.run_at))
            ));
        }
        if self.priority != row.priority {
            out.push(format!("priority {} -> {}", row.priority, self.priority));
        }
        if self.deadline != row.deadline {
            out.push(format!(
                "deadline {} -> {}",
                time(row.deadline),
                time(self.deadline)
            ));
        }
        if self.max_attempts != row.max_attempts {
            out.push(format!(
                "max_attempts {} -> {}",
                row.max_attempts, self.max_attempts
            ));
        }
        if self.target_worker != row.target_worker || self.target_labels != row.target_labels {
            out.push(format!(
                "target {} -> {}",
                target(&row.target_worker, &row.target_labels),
                target(&self.target_worker, &self.target_labels)
            ));
        }
        if out.is_empty() {
            "nothing changed".to_string()
        } else {
            out.join("; ")
        }
    }
}

/// Whether an operator's update may change a task in `state`: not while it is
/// leased, nor once it succeeded.
pub(crate) fn updatable(state: StoredState) -> bool {
    !matches!(state, StoredState::Leased | StoredState::Succeeded)
}

/// Whether the update `u` may change a task in `state`: as [`updatable`], and
/// a target changes only while the task waits (pending or blocked).
pub(crate) fn update_allowed(state: StoredState, u: &TaskUpdate) -> bool {
    updatable(state)
        && (u.target.is_none() || matches!(state, StoredState::Pending | StoredState::Blocked))
}

/// `statement` with its one `IN (?)` list widened to `n` placeholders: the
/// list of ids of a read whose length varies (SQLite, MySQL; Postgres binds an
/// array).
pub(crate) fn in_list(statement: &str, n: usize) -> String {
    let marks = vec!["?"; n].join(", ");
    statement.replacen("IN (?)", &format!("IN ({marks})"), 1)
}

/// The rows of `statement` (see [`in_list`]) for these ids, read in pieces of
/// at most 500 ids: one read a piece, the same for every sqlx database whose
/// placeholders are `?`.
pub(crate) async fn by_id_list<DB, R>(
    pool: &sqlx::Pool<DB>,
    statement: &'static str,
    ids: &[String],
) -> StoreResult<Vec<R>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> &'q String: sqlx::Encode<'q, DB>,
    String: sqlx::Type<DB>,
    R: for<'r> sqlx::FromRow<'r, DB::Row> + Send + Unpin,
{
    let mut out = Vec::new();
    for piece in ids.chunks(500) {
        let text = in_list(statement, piece.len());
        let mut q = sqlx::query_as::<DB, R>(sqlx::AssertSqlSafe(text));
        for id in piece {
            q = q.bind(id);
        }
        out.extend(q.fetch_all(pool).await?);
    }
    Ok(out)
}

/// `Tasks::attempt_list`: whether the task exists, then its attempts. The
/// attempts statement takes the task id `binds` times (MySQL's `?` cannot
/// name one parameter twice).
pub(crate) async fn attempt_list<DB>(
    pool: &sqlx::Pool<DB>,
    [task, attempts]: [&'static str; 2],
    binds: usize,
    task_id: &str,
) -> StoreResult<Option<Vec<AttemptRecord>>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB>,
    str: sqlx::Type<DB>,
    (i64,): for<'r> sqlx::FromRow<'r, DB::Row>,
    super::row::AttemptRow: for<'r> sqlx::FromRow<'r, DB::Row>,
{
    let exists: Option<(i64,)> = sqlx::query_as(task)
        .bind(task_id)
        .fetch_optional(pool)
        .await?;
    if exists.is_none() {
        return Ok(None);
    }
    let mut q = sqlx::query_as::<DB, super::row::AttemptRow>(attempts);
    for _ in 0..binds {
        q = q.bind(task_id);
    }
    q.fetch_all(pool)
        .await?
        .into_iter()
        .map(super::row::AttemptRow::into_record)
        .collect::<StoreResult<Vec<_>>>()
        .map(Some)
}
