//! The `Store` trait: everything the broker needs from a database, and nothing of
//! gRPC. One implementation per database (`sqlite`, `postgres`); both are proven by
//! the shared conformance suite in `server/tests/store_conformance.rs`.
//!
//! Every method that depends on time takes `now`, so tests control the clock.
//! Timestamps are stored as milliseconds since the Unix epoch (BIGINT) in both
//! databases, so the two implementations share their row types and rules.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::{AttemptOutcome, StoredState, TaskState};

pub mod mysql;
pub mod postgres;
pub mod sqlite;

pub(crate) mod row;

pub use crate::domain::model::*;

mod observe;
pub use observe::*;
// Schedules (migration 0006).
mod schedule;
pub use schedule::{
    DueSchedule, Fired, FiredRun, NewRun, ScheduleFilter, ScheduleFire, ScheduleRecord,
    ScheduleRunFilter, ScheduleRunRecord, TaskTemplate,
};
// Routing and the worker registry (migration 0008).
mod routing;
pub use routing::{LeaseRouting, WorkerFilter, WorkerLeaseRecord, WorkerRecord, WorkerSeen};
pub(crate) use routing::{WorkerLeaseRow, WorkerRow, worker_lease};
// Admission (migration 0009).
pub mod admission;
pub use admission::{QueueUsage, StoredQueue};
// Sync match.
pub mod sync_match;
pub use sync_match::{MatchTo, MatchedInsert};

// Flow: dependencies, events, bulk operations (migration 0010).
mod flow;
pub use flow::{
    BulkCancelled, BulkFilter, EventRecord, FlowInserted, FlowSpec, MAX_WAITS_PER_KEY, TaskFlowInfo,
};
// REPLACE_WAITING.
mod replace;
pub use replace::Replacement;

// The lease reply bound as SQL.
pub(crate) mod reply;
pub(crate) use replace::merged_metadata;

/// A store failure, classified for the caller.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached now; the request may be retried.
    #[error("database unavailable")]
    Unavailable(#[source] BoxError),
    /// Anything else.
    #[error("database error")]
    Internal(#[source] BoxError),
    /// Stored data that the broker cannot read back.
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// Migrations could not be applied.
    #[error("migration failed")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    /// The database URL is wrong, none of its hosts is of the kind it asks
    /// for, or the database refused a migration (one line, for the operator).
    #[error("{0}")]
    Config(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        let unavailable = match &e {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed => true,
            // With TLS built in, sqlx opens each connection with an SSLRequest; a
            // connection the network drops before Postgres answers reads as a 0x00
            // answer, i.e. this protocol error. It is an outage, not a bug.
            sqlx::Error::Protocol(m) => m.starts_with("unexpected response from SSLRequest"),
            sqlx::Error::Database(db) => matches!(
                db.code().as_deref(),
                // Postgres: admin/crash shutdown, cannot connect now, too many
                // connections, disk full, out of memory; a write on a host that
                // became a standby (read-only transaction) during a failover.
                Some("57P01" | "57P02" | "57P03" | "53300" | "53100" | "53200" | "08006" | "08001" | "08004" | "25006")
                // Postgres and MySQL: a deadlock or a serialization failure; the
                // transaction was rolled back whole, so the call may be sent again.
                | Some("40P01" | "40001")
                // SQLite: busy, locked.
                | Some("5" | "6" | "517" | "261")
                // MySQL/MariaDB: lost connection to the server, server shutdown.
                | Some("08S01")
            ),
            _ => false,
        };
        if unavailable {
            StoreError::Unavailable(Box::new(e))
        } else {
            StoreError::Internal(Box::new(e))
        }
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode::{DatabaseBusy, DatabaseLocked, DiskFull, SystemIoFailure};
        match e.sqlite_error_code() {
            Some(DatabaseBusy | DatabaseLocked | SystemIoFailure | DiskFull) => {
                StoreError::Unavailable(Box::new(e))
            }
            _ => StoreError::Internal(Box::new(e)),
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// The database driver's error behind a `StoreError`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The database host is a standby (in recovery): it answers, and refuses every
/// write. A readiness check says so inside [`StoreError::Unavailable`].
#[derive(Debug, thiserror::Error)]
#[error("the database host is a standby (in recovery)")]
pub struct InRecovery;

impl StoreError {
    /// Whether the database answered as a standby (see [`InRecovery`]).
    pub fn is_standby(&self) -> bool {
        matches!(self, StoreError::Unavailable(e) if e.is::<InRecovery>())
    }
}

/// Called with a queue that has a newly pending task, or `None` for "maybe any queue".
pub type Waker = std::sync::Arc<dyn Fn(Option<&str>) + Send + Sync>;

/// The database behind the broker.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Which database this is, for logs ("sqlite", "postgres").
    fn backend(&self) -> &'static str;

    /// What this store offers beyond the common ground (see [`Capabilities`]).
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    /// Applies pending migrations.
    async fn migrate(&self) -> StoreResult<()>;

    /// Checks that the database answers.
    async fn ping(&self) -> StoreResult<()>;

    /// Inserts tasks in one transaction, in order. A task whose (queue, key) exists
    /// already (or earlier in the same batch) is not inserted; the existing id is returned.
    async fn task_insert_many(
        &self,
        tasks: &[NewTask],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<Inserted>>;

    /// Leases up to `max_tasks` ready tasks in lease order, each with a new token and
    /// fencing token. Tasks come back in lease order. (An attempt's row is written
    /// when it ends; until then `attempt_list` shows it from the task.)
    async fn task_lease_available(&self, p: &LeaseParams) -> StoreResult<Vec<TaskRecord>>;

    /// Serves several lease requests for the same queues at once (the waiting
    /// long-polls of those queues), one answer per request, in order. When there
    /// are fewer ready tasks than asked for, they are shared out one at a time in
    /// request order (see [`lease_shares`]), so every waiter gets some. Each
    /// request's tasks are in lease order and leased to its worker. All requests
    /// must name the same queues; they are leased at the latest of their `now`.
    async fn task_lease_many(&self, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>> {
        let mut out = Vec::with_capacity(ps.len());
        for p in ps {
            out.push(self.task_lease_available(p).await?);
        }
        Ok(out)
    }

    /// The earliest `run_at` after `now` of a pending task in these queues, so a
    /// long-poll knows when to look again.
    async fn task_next_run_at(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<DateTime<Utc>>>;

    /// Extends live leases, each by `extend_by` or the duration it was leased with,
    /// capped at the task's deadline. One status per lease, in order.
    async fn lease_extend(
        &self,
        leases: &[LeaseRef],
        extend_by: Option<Duration>,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<LeaseState>>;

    /// Stores a checkpoint under a live lease, optionally extending it.
    async fn task_checkpoint(&self, p: &CheckpointParams) -> StoreResult<Settled<LeaseState>>;

    /// Settles a live lease as succeeded.
    async fn task_complete(&self, p: &CompleteParams) -> StoreResult<Settled<Completed>>;

    /// Settles many live leases as succeeded, each as `task_complete` would, in one
    /// transaction. One outcome per item, in order.
    async fn task_complete_many(
        &self,
        ps: &[CompleteParams],
    ) -> StoreResult<Vec<Settled<Completed>>>;

    /// Settles a live lease as failed and applies the retry policy.
    async fn task_fail(&self, p: &FailParams) -> StoreResult<Settled<FailResult>>;

    /// Reclaims expired leases (a failed attempt, "lease expired") and kills tasks
    /// whose deadline passed, up to `limit` of each.
    async fn lease_reclaim_expired(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Reaped>;

    async fn task_get(&self, task_id: &str) -> StoreResult<Option<TaskRecord>>;

    /// Backpressure: the waiting tasks (pending or blocked) of `queue` and the
    /// sum of their payload bytes.
    async fn queue_pending(&self, queue: &str) -> StoreResult<(u64, u64)>;

    /// The tasks that hold any of these `(queue, key)` pairs.
    async fn task_find_keys(&self, keys: &[(String, String)]) -> StoreResult<Vec<TaskRecord>>;

    /// The queue of each named task that exists, by task id.
    async fn task_queues(
        &self,
        task_ids: &[String],
    ) -> StoreResult<std::collections::HashMap<String, String>>;

    async fn task_list(&self, filter: &TaskFilter) -> StoreResult<Vec<TaskRecord>>;

    /// Pending -> cancelled; leased -> cancel requested; cancelled stays; others refuse.
    async fn task_cancel(&self, task_id: &str, now: DateTime<Utc>) -> StoreResult<Changed>;

    /// Changes a task that is not leased and not succeeded.
    async fn task_update(
        &self,
        task_id: &str,
        update: &TaskUpdate,
        now: DateTime<Utc>,
    ) -> StoreResult<Changed>;

    /// Dead or cancelled -> pending now, with `max_attempts` further attempts.
    async fn task_requeue(&self, task_id: &str, now: DateTime<Utc>) -> StoreResult<Changed>;

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

    /// Counts per queue (all queues with tasks when `queues` is empty).
    async fn queue_stats(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<QueueStatsRecord>>;

    /// Starts delivering wake-ups for tasks made pending by other broker replicas
    /// (Postgres LISTEN/NOTIFY) until `stop`. A single-process store has none.
    fn spawn_listener(&self, _wake: Waker, _stop: tokio_util::sync::CancellationToken) {}

    /// What the listener of [`Store::spawn_listener`] received so far.
    fn notification_stats(&self) -> NotificationStats {
        NotificationStats::default()
    }

    /// Deletes up to `limit` tasks (and their attempts) that finished before
    /// `before`, in the queues `scope` selects. Returns how many.
    async fn task_purge_finished(
        &self,
        before: DateTime<Utc>,
        scope: &PurgeScope,
        limit: u32,
    ) -> StoreResult<u64>;

    /// Connection pool usage.
    fn pool_stats(&self) -> PoolStats;

    /// Refreshes the planner's statistics of the task table when they fall far
    /// behind it (Postgres, whose hot statements keep cached plans made on them);
    /// true when it did. Called every second by the maintenance loop.
    async fn statistics_refresh(&self) -> StoreResult<bool> {
        Ok(false)
    }

    // ---- schedules ----

    /// Inserts a new schedule; `false` when its id exists already.
    async fn schedule_insert(&self, s: &ScheduleRecord) -> StoreResult<bool>;

    async fn schedule_get(&self, id: &str) -> StoreResult<Option<ScheduleRecord>>;

    /// Schedules in id order, after `after_id`, up to `limit`.
    async fn schedule_list(&self, f: &ScheduleFilter) -> StoreResult<Vec<ScheduleRecord>>;

    /// Writes every changeable field of `s` (not runs, last fire, creator) if the
    /// stored version is still `s.version`, and bumps the version. `false`: it
    /// changed meanwhile or is gone; nothing was written.
    async fn schedule_update(&self, s: &ScheduleRecord, now: DateTime<Utc>) -> StoreResult<bool>;

    /// Deletes a schedule and its run history; `false` when there was none.
    async fn schedule_delete(&self, id: &str) -> StoreResult<bool>;

    /// Unpaused schedules with `next_fire_at <= now`, earliest first, up to
    /// `limit` (an index scan: the cost follows the schedules due).
    async fn schedule_due(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Vec<DueSchedule>>;

    /// Records runs, inserts their tasks and moves the cursor, in one transaction
    /// (see [`ScheduleFire`]).
    async fn schedule_fire(&self, f: &ScheduleFire) -> StoreResult<Fired>;

    /// The run history, newest fire time first.
    async fn schedule_run_list(&self, f: &ScheduleRunFilter)
    -> StoreResult<Vec<ScheduleRunRecord>>;

    /// Closes the pool.
    async fn close(&self);

    // ---- reads of the whole broker (the console) and bulk requeue ----

    /// Attempts that finished in `[since, until)`, counted per queue, bucket and
    /// outcome (succeeded or not).
    async fn attempt_histogram(
        &self,
        p: &AttemptHistogramParams,
    ) -> StoreResult<Vec<AttemptBucket>>;

    /// Run times of successful attempts finished since `since`, most recent first.
    async fn attempt_durations(
        &self,
        p: &AttemptDurationParams,
    ) -> StoreResult<Vec<AttemptDuration>>;

    /// Dead tasks grouped by (queue, last error), largest group first.
    async fn task_dead_groups(&self, p: &DeadGroupParams) -> StoreResult<Vec<DeadGroup>>;

    /// Requeues up to `limit` dead tasks of one queue and error (dead -> pending
    /// now with `max_attempts` further attempts); returns how many.
    async fn task_requeue_dead(&self, p: &RequeueDeadParams) -> StoreResult<u64>;

    /// The workers that hold leases now, one row per (worker, address, queue).
    async fn lease_holders(&self, p: &LeaseHolderParams) -> StoreResult<Vec<LeaseHolder>>;

    /// Cancels up to `limit` dead tasks of one queue (and error, or one task):
    /// dead -> cancelled, keeping attempts, last error and finished time; returns how many.
    async fn task_cancel_dead(&self, p: &CancelDeadParams) -> StoreResult<u64>;
    // ---- routing: the worker registry ----

    /// Records workers as seen now (insert, or update labels, address, last seen
    /// and, when given, queues), in one transaction.
    async fn worker_record_seen(&self, seen: &[WorkerSeen]) -> StoreResult<()>;

    /// Workers seen since `seen_since`, by worker id, with their lease counts.
    async fn worker_list(&self, f: &WorkerFilter) -> StoreResult<Vec<WorkerRecord>>;

    /// One worker (whenever last seen) and the leases it holds now.
    async fn worker_get(
        &self,
        worker_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<(WorkerRecord, Vec<WorkerLeaseRecord>)>>;

    // ---- Flow: dependencies, events, bulk operations ----

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

    /// The dependencies and cancel reason of each named task that exists.
    async fn task_flow_info(
        &self,
        task_ids: &[String],
    ) -> StoreResult<std::collections::HashMap<String, TaskFlowInfo>>;

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

    /// Replaces the per-queue dead-letter queues (from the configuration).
    async fn queue_dead_letters_set(&self, pairs: &[(String, String)]) -> StoreResult<()>;

    /// The tasks a bulk filter selects, oldest first, up to `limit`.
    async fn task_select(&self, f: &BulkFilter) -> StoreResult<Vec<TaskRecord>>;

    /// Cancels these tasks (pending, blocked: at once; leased: cancel requested),
    /// in one transaction; others are left alone.
    async fn task_cancel_many(
        &self,
        task_ids: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<BulkCancelled>;

    /// Requeues these dead or cancelled tasks, each to run at its time, with
    /// `max_attempts` further attempts, in one transaction; returns how many.
    async fn task_requeue_many(
        &self,
        tasks: &[(String, DateTime<Utc>)],
        now: DateTime<Utc>,
    ) -> StoreResult<u64>;

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

    // Admission (migration 0009).

    /// Every queue's stored settings, by name.
    async fn queue_list(&self) -> StoreResult<Vec<StoredQueue>>;

    /// Seeds the settings of the configuration's `[queues.X]`: stored where a
    /// queue has none or only an earlier seed; a queue an operator changed keeps
    /// its settings. Earlier seeds of queues not in `seed` are removed.
    async fn queue_seed(
        &self,
        seed: &[(String, crate::domain::admission::QueueConfig)],
    ) -> StoreResult<()>;

    /// Stores a queue's settings if its stored version is still `version`
    /// (`None`: it has none stored); returns false otherwise. Wakes the queue's
    /// long-polls on every replica.
    async fn queue_put(
        &self,
        name: &str,
        config: &crate::domain::admission::QueueConfig,
        version: Option<i64>,
        now: DateTime<Utc>,
    ) -> StoreResult<bool>;

    /// Leases as `task_lease_many` does, through every gate of the queues'
    /// stored settings (pause, concurrency and rate limits, fairness, aging),
    /// enforced for the whole cluster. Used only for queues with gates.
    async fn task_lease_gated(&self, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>>;

    /// A queue's settings, leases, the leases of `key`, and its buckets, now.
    async fn queue_usage(
        &self,
        queue: &str,
        key: Option<&str>,
        now: DateTime<Utc>,
    ) -> StoreResult<QueueUsage>;

    /// How many READY tasks of a pending task's queue lease before it, in the
    /// gated lease's order (effective priority, the key's turn under round robin,
    /// deadline, run_at, submission).
    async fn task_ahead(
        &self,
        task: &TaskRecord,
        aging_ms: Option<i64>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64>;

    // Sync match.

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

    /// Gives back leases nobody received (their long-poll went away before the
    /// answer): each task still leased under its token becomes pending again as
    /// if the lease had not been taken (the attempt is not counted; the fencing
    /// token stays spent), and its queue is notified. Returns how many.
    async fn lease_release(&self, leases: &[LeaseRef], now: DateTime<Utc>) -> StoreResult<u64>;

    /// Admission: deletes the per-key rate-limit buckets that are full
    /// again at `now` (a bucket absent is a full one), and those of queues
    /// without a per-key rate limit; returns how many. Run by retention, which
    /// also drops the round-robin turns of queues without round robin and
    /// those [`crate::domain::admission::TURNS_KEPT`] grants old.
    async fn queue_key_tokens_purge(&self, now: DateTime<Utc>) -> StoreResult<u64>;
}

/// Opens the store a URL names: `sqlite://PATH` (created if missing), `postgres://...`
/// or `mysql://...` (MySQL or MariaDB).
pub async fn connect(url: &str, max_connections: u32) -> StoreResult<std::sync::Arc<dyn Store>> {
    if url.starts_with("mysql://") {
        Ok(std::sync::Arc::new(
            mysql::MysqlStore::connect(url, max_connections).await?,
        ))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(std::sync::Arc::new(
            postgres::PostgresStore::connect(url, max_connections).await?,
        ))
    } else {
        Ok(std::sync::Arc::new(
            sqlite::SqliteStore::connect(url).await?,
        ))
    }
}
