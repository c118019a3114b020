//! The `Store` trait: everything the broker needs from a database, and nothing of
//! gRPC. One implementation per database (`sqlite`, `postgres`); both are proven by
//! the shared conformance suite in `server/tests/store_conformance.rs`.
//!
//! Every method that depends on time takes `now`, so tests control the clock.
//! Timestamps are stored as milliseconds since the Unix epoch (BIGINT) in both
//! databases, so the two implementations share their row types and rules.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::{AttemptOutcome, RetryPolicy, StoredState, TaskState};

pub mod postgres;
pub mod sqlite;

pub(crate) mod row;

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
pub use flow::{BulkCancelled, BulkFilter, EventRecord, FlowInserted, FlowSpec, TaskFlowInfo};

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
                // connections, disk full, out of memory.
                Some("57P01" | "57P02" | "57P03" | "53300" | "53100" | "53200" | "08006" | "08001" | "08004")
                // SQLite: busy, locked.
                | Some("5" | "6" | "517" | "261")
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

/// Called with a queue that has a newly pending task, or `None` for "maybe any queue".
pub type Waker = std::sync::Arc<dyn Fn(Option<&str>) + Send + Sync>;

/// A task to insert. The id is chosen by the caller (UUIDv7).
#[derive(Debug, Clone)]
pub struct NewTask {
    pub id: String,
    pub queue: String,
    pub key: Option<String>,
    pub payload: Vec<u8>,
    pub priority: i32,
    pub run_at: DateTime<Utc>,
    pub deadline: Option<DateTime<Utc>>,
    pub retry: RetryPolicy,
    pub metadata: BTreeMap<String, String>,
    /// Target, sticky policy and fan-out group (routing).
    pub routing: crate::domain::routing::TaskRouting,
    /// Admission: counts against the queue's per-key limits.
    pub concurrency_key: Option<String>,
}

/// One inserted (or deduplicated) task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inserted {
    pub task_id: String,
    pub deduplicated: bool,
}

#[derive(Debug, Clone)]
pub struct LeaseParams {
    pub queues: Vec<String>,
    pub max_tasks: u32,
    /// Reply size budget: tasks are taken in lease order while their bytes stay
    /// within it, and the first always; see [`LEASE_REPLY_TASK_BYTES`].
    pub max_reply_bytes: u64,
    pub worker_id: String,
    pub worker_address: String,
    pub lease_duration: Duration,
    pub now: DateTime<Utc>,
    /// The worker's labels and the queues' per-worker caps (routing).
    pub routing: LeaseRouting,
}

/// What each task adds to a Lease reply besides its payload, checkpoint and
/// metadata (ids, token, queue, key, timestamps, framing), counted generously.
pub const LEASE_REPLY_TASK_BYTES: i64 = 512;

/// The order in which requests served together receive tasks: one slot per task
/// asked for, slot k of every request (in request order) before slot k + 1 of
/// any. The n-th ready task in lease order goes to the request of the n-th slot.
pub fn lease_slots(wanted: &[u32]) -> Vec<usize> {
    let rounds = wanted.iter().copied().max().unwrap_or(0);
    (0..rounds)
        .flat_map(|k| (0..wanted.len()).filter(move |&i| wanted[i] > k))
        .collect()
}

/// How many of `available` ready tasks each request gets when requests asking for
/// `wanted` tasks are served together (see [`lease_slots`]).
pub fn lease_shares(wanted: &[u32], available: usize) -> Vec<u32> {
    let mut shares = vec![0u32; wanted.len()];
    for i in lease_slots(wanted).into_iter().take(available) {
        shares[i] += 1;
    }
    shares
}

/// Names one lease.
#[derive(Debug, Clone)]
pub struct LeaseRef {
    pub task_id: String,
    pub lease_token: String,
}

/// The state of one lease after an extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    Lost,
    Live {
        lease_expires_at: DateTime<Utc>,
        cancel_requested: bool,
    },
}

#[derive(Debug, Clone)]
pub struct CheckpointParams {
    pub task_id: String,
    pub lease_token: String,
    pub checkpoint: Vec<u8>,
    pub extend_by: Option<Duration>,
    pub now: DateTime<Utc>,
}

#[derive(Debug, Clone)]
pub struct CompleteParams {
    pub task_id: String,
    pub lease_token: String,
    pub result: Vec<u8>,
    pub now: DateTime<Utc>,
}

#[derive(Debug, Clone)]
pub struct FailParams {
    pub task_id: String,
    pub lease_token: String,
    pub error: String,
    pub non_retryable: bool,
    pub retry_after: Option<Duration>,
    pub now: DateTime<Utc>,
    /// Random sample in [0, 1) for the backoff jitter.
    pub jitter_unit: f64,
    /// Reserve the retry for the worker that failed it (routing).
    pub prefer_same_worker: bool,
}

/// The task's state after a Fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailResult {
    pub queue: String,
    pub state: TaskState,
    pub next_run_at: Option<DateTime<Utc>>,
    /// When the failed attempt was leased (for run-time metrics).
    pub leased_at: Option<DateTime<Utc>>,
}

/// A completed task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    pub queue: String,
    /// When the attempt was leased (for run-time metrics).
    pub leased_at: Option<DateTime<Utc>>,
}

/// Which queues a purge covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PurgeScope {
    Only(String),
    AllExcept(Vec<String>),
}

/// Connection pool usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    pub size: u32,
    pub idle: usize,
}

/// Wake-up notifications a store's listener received: Postgres only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NotificationStats {
    /// Notifications received on the wake-up channel.
    pub received: u64,
    /// Of those, the ones this store sent itself, whose waiters its broker had
    /// woken already: not acted on again.
    pub own_skipped: u64,
}

/// What a maintenance pass did to one queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueReaped {
    pub reclaimed: u64,
    /// Tasks that went DEAD (budget spent or deadline passed).
    pub dead: u64,
}

/// What a report (Checkpoint, Complete, Fail) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled<T> {
    /// Applied now.
    Applied(T),
    /// Already applied with the same token earlier: nothing changed.
    AlreadySettled(T),
    LeaseLost,
    NotFound,
}

/// What a maintenance pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reaped {
    /// Expired leases reclaimed.
    pub reclaimed: u64,
    /// Tasks killed by their deadline.
    pub deadline_exceeded: u64,
    /// Queues that received a pending task, to wake their waiters.
    pub queues: Vec<String>,
    /// Per queue, for metrics.
    pub by_queue: BTreeMap<String, QueueReaped>,
}

/// Filters and page position of ListTasks; newest first.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub queue: Option<String>,
    pub states: Vec<TaskState>,
    pub key: Option<String>,
    pub worker_id: Option<String>,
    /// Only tasks whose last error is exactly this (`""` matches none).
    pub last_error: Option<String>,
    pub created_after: Option<DateTime<Utc>>,
    pub created_before: Option<DateTime<Utc>>,
    /// Only tasks made by this schedule.
    pub schedule_id: Option<String>,
    /// Only tasks submitted before the task with this sequence number.
    pub before_seq: Option<i64>,
    /// Only the copies of this fan-out group (routing).
    pub fanout_group: Option<String>,
    pub limit: u32,
    pub now: DateTime<Utc>,
    /// With `created_after` or `created_before` the list is in creation order
    /// (newest first, then by sequence number) and a page starts after the task
    /// created at `before_created` with sequence number `before_seq`.
    pub before_created: Option<DateTime<Utc>>,
}

/// The changes of UpdateTask; `None` leaves a field alone.
#[derive(Debug, Clone, Default)]
pub struct TaskUpdate {
    pub run_at: Option<DateTime<Utc>>,
    pub priority: Option<i32>,
    pub deadline: Option<Option<DateTime<Utc>>>,
    pub max_attempts: Option<u32>,
}

/// What an admin change did.
#[derive(Debug, Clone)]
pub enum Changed {
    Done(Box<TaskRecord>),
    NotFound,
    /// The task is in a state that does not allow the change.
    WrongState(StoredState),
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    pub seq: i64,
    pub id: String,
    pub queue: String,
    pub key: Option<String>,
    pub payload: Vec<u8>,
    pub priority: i32,
    pub run_at: DateTime<Utc>,
    pub deadline: Option<DateTime<Utc>>,
    pub state: StoredState,
    pub attempt: u32,
    pub max_attempts: u32,
    pub attempts_allowed: u32,
    pub retry: RetryPolicy,
    pub metadata: BTreeMap<String, String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub last_error: Option<String>,
    pub checkpoint: Option<Vec<u8>>,
    pub result: Option<Vec<u8>>,
    pub leased_by: Option<String>,
    pub lease_token: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub fencing_token: u64,
    pub finished_at: Option<DateTime<Utc>>,
    pub cancel_requested: bool,
    /// The schedule that made the task, and the fire time it was made for.
    pub schedule_id: Option<String>,
    pub fire_time: Option<DateTime<Utc>>,
    /// Target, sticky policy, fan-out group and reservation (routing).
    pub routing: crate::domain::routing::TaskRouting,
    /// Admission: counts against the queue's per-key limits.
    pub concurrency_key: Option<String>,
}

/// One attempt (lease) of a task.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    pub attempt: u32,
    pub worker_id: String,
    pub worker_address: String,
    pub leased_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub outcome: AttemptOutcome,
    pub error: Option<String>,
    pub fencing_token: u64,
}

/// Counts of one queue.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueStatsRecord {
    pub queue: String,
    pub scheduled: u64,
    pub ready: u64,
    pub leased: u64,
    pub succeeded: u64,
    pub dead: u64,
    pub cancelled: u64,
    pub oldest_ready_at: Option<DateTime<Utc>>,
    pub completed_last_minute: u64,
    pub failed_last_minute: u64,
}

/// The database behind the broker.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Which database this is, for logs ("sqlite", "postgres").
    fn backend(&self) -> &'static str;

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
    /// unseen. An unknown dependency id inserts nothing.
    async fn task_insert_flow(
        &self,
        tasks: &[NewTask],
        flows: &[FlowSpec],
        now: DateTime<Utc>,
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

    /// How many READY tasks of a pending task's queue lease before it (by
    /// effective priority, then submission order).
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
    /// without a per-key rate limit; returns how many. Run by retention.
    async fn queue_key_tokens_purge(&self, now: DateTime<Utc>) -> StoreResult<u64>;
}

/// Opens the store a URL names: `sqlite://PATH` (created if missing) or `postgres://...`.
pub async fn connect(url: &str, max_connections: u32) -> StoreResult<std::sync::Arc<dyn Store>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(std::sync::Arc::new(
            postgres::PostgresStore::connect(url, max_connections).await?,
        ))
    } else {
        Ok(std::sync::Arc::new(
            sqlite::SqliteStore::connect(url).await?,
        ))
    }
}
