//! The types the `Store` trait takes and returns: tasks to insert and as stored,
//! the parameters of leases and reports and what they did, list filters, admin
//! changes, attempts, queue counts, pool and listener stats; and lease order,
//! the one ordering of READY tasks that every lease, sync match and reply uses.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{AttemptOutcome, RetryPolicy, StoredState, TaskState};

/// What a store offers beyond the `Store` trait's common ground, for the
/// service to decide by (never by the database's name).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Several broker replicas may share the database: a task made pending by
    /// one may have waiters on another, which hear of it through notifications.
    pub shared: bool,
    /// Several write calls of one kind (settles, leases of the same queues) may
    /// run at once in one broker: each is its own transaction, kept apart from
    /// the others by row locks (`SKIP LOCKED` picks, the lease token checked under
    /// the row's lock) and run again when it loses a deadlock (MySQL).
    pub parallel_writes: bool,
}

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
    /// The checkpoint the first attempt's lease hands over (TaskSpec.checkpoint),
    /// stored where a worker's Checkpoint stores its own; none: no checkpoint.
    pub checkpoint: Option<Vec<u8>>,
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
    /// Reply size budget: tasks are taken in lease order while the bound of
    /// their reply bytes stays within it, and the first always; see
    /// [`crate::domain::reply`].
    pub max_reply_bytes: u64,
    pub worker_id: String,
    pub worker_address: String,
    pub lease_duration: Duration,
    pub now: DateTime<Utc>,
    /// The worker's labels and the queues' per-worker caps (routing).
    pub routing: LeaseRouting,
}

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
    /// With `before_created`: where the page starts (see there). Alone (a page
    /// token of an earlier version): only tasks submitted before the task with
    /// this sequence number.
    pub before_seq: Option<i64>,
    /// Only the copies of this fan-out group (routing).
    pub fanout_group: Option<String>,
    /// Only tasks whose target names this worker.
    pub target_worker: Option<String>,
    /// Only tasks whose target labels include every pair.
    pub target_labels: std::collections::BTreeMap<String, String>,
    /// Only tasks whose metadata has this key, mapped to the value when given.
    pub metadata: Option<(String, Option<String>)>,
    pub limit: u32,
    pub now: DateTime<Utc>,
    /// The list is in creation order (newest first, then by sequence number);
    /// a page starts after the task created at `before_created` with sequence
    /// number `before_seq`.
    pub before_created: Option<DateTime<Utc>>,
}

/// The changes of UpdateTask; `None` leaves a field alone.
#[derive(Debug, Clone, Default)]
pub struct TaskUpdate {
    pub run_at: Option<DateTime<Utc>>,
    pub priority: Option<i32>,
    pub deadline: Option<Option<DateTime<Utc>>>,
    pub max_attempts: Option<u32>,
    /// A new target (an empty one: anyone may lease the task); only while it waits.
    pub target: Option<crate::domain::routing::Target>,
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
    /// Flow: RetryPolicy.schedule, the delay before each retry (the last one
    /// repeats); empty when the task backs off exponentially by `retry`.
    pub retry_schedule: Vec<Duration>,
    /// Flow: the results of the dependencies that succeeded, by task id (filled
    /// by a lease for a task with dependencies, empty otherwise).
    pub dependency_results: BTreeMap<String, Vec<u8>>,
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

/// What a lease request says about its worker, besides its id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseRouting {
    /// The worker's labels (matched against each task's target labels).
    pub labels: BTreeMap<String, String>,
    /// Per queue, the leases one worker may hold at most (`[queues.X]
    /// max_leases_per_worker`); queues without a cap are absent.
    pub max_leases_per_worker: BTreeMap<String, u32>,
}

impl LeaseRouting {
    /// The labels as the JSON object every store compares with.
    pub fn labels_json(&self) -> String {
        serde_json::to_string(&self.labels).unwrap_or_else(|_| "{}".into())
    }

    /// The cap of each of `queues`, in order; 0 means none.
    pub fn caps(&self, queues: &[String]) -> Vec<i32> {
        queues
            .iter()
            .map(|q| {
                self.max_leases_per_worker
                    .get(q)
                    .map_or(0, |&c| i32::try_from(c).unwrap_or(i32::MAX))
            })
            .collect()
    }
}

/// What a submitted task adds for flow; `Default` is a plain task.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FlowSpec {
    /// Task ids this task waits for.
    pub depends_on: Vec<String>,
    /// Earlier tasks of the same insert this task waits for (by index).
    pub depends_on_index: Vec<usize>,
    /// Tasks this task waits for by (queue, key), which may not exist yet.
    pub depends_on_keys: Vec<TaskKey>,
    pub run_if_dependency_fails: bool,
    /// RetryPolicy.schedule: explicit delays, the last one repeating.
    pub retry_schedule: Vec<Duration>,
    /// The producer that submits the task (its token's name), set by the
    /// broker: its dependencies, by id or by key, may name only that
    /// producer's tasks. `None` (no authentication, an admin token): any task.
    pub producer: Option<String>,
}

impl FlowSpec {
    /// True when the task needs nothing of flow (the plain insert serves it).
    pub fn is_plain(&self) -> bool {
        !self.has_dependencies() && !self.run_if_dependency_fails && self.retry_schedule.is_empty()
    }

    /// True when the task waits for other tasks.
    pub fn has_dependencies(&self) -> bool {
        !self.depends_on.is_empty()
            || !self.depends_on_index.is_empty()
            || !self.depends_on_keys.is_empty()
    }
}

/// A task named by its queue and key (TaskSpec.depends_on_keys).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskKey {
    pub queue: String,
    pub key: String,
}

/// A READY task's place in lease order, as a key that sorts ascending in that
/// order: effective priority (higher first), its key's turn (round robin; 1
/// otherwise), deadline (the earliest first, none last), run_at, then submission
/// order (`seq`). Every ordering of READY tasks computed in Rust is this one, and
/// the stores' lease statements and indexes order by the same columns.
pub type LeaseKey = (i64, i64, i64, i64, i64);

/// See [`LeaseKey`]; times are milliseconds since the epoch.
pub fn lease_key(
    priority: i64,
    turn: i64,
    deadline: Option<i64>,
    run_at: i64,
    seq: i64,
) -> LeaseKey {
    (
        priority.saturating_neg(),
        turn,
        deadline.unwrap_or(i64::MAX),
        run_at,
        seq,
    )
}

impl TaskRecord {
    /// This task's place in lease order.
    pub fn lease_key(&self) -> LeaseKey {
        lease_key(
            i64::from(self.priority),
            1,
            self.deadline.map(|d| d.timestamp_millis()),
            self.run_at.timestamp_millis(),
            self.seq,
        )
    }
}

/// Sorts tasks into lease order (a statement's RETURNING gives no order).
pub fn sort_lease_order(tasks: &mut [TaskRecord]) {
    tasks.sort_by_key(TaskRecord::lease_key);
}

/// Whether a new task could be leased at `now`.
pub fn due(t: &NewTask, now: DateTime<Utc>) -> bool {
    t.run_at <= now && t.deadline.is_none_or(|d| d > now)
}

/// The positions of the tasks of a batch that are due at `now`, in lease order
/// (submission order being the batch's order, which becomes the order of `seq`).
pub fn batch_lease_order(tasks: &[NewTask], now: DateTime<Utc>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..tasks.len()).filter(|&i| due(&tasks[i], now)).collect();
    order.sort_by_key(|&i| {
        let t = &tasks[i];
        lease_key(
            i64::from(t.priority),
            1,
            t.deadline.map(|d| d.timestamp_millis()),
            t.run_at.timestamp_millis(),
            i64::try_from(i).unwrap_or(i64::MAX),
        )
    });
    order
}
