//! The MySQL/MariaDB store (MySQL 8.0+, MariaDB 10.6+), for several broker
//! replicas sharing one database, as the Postgres store is.
//!
//! Every write runs as a [`Job`]: one READ COMMITTED transaction (no gap locks on
//! the hot path) whose operations buffer the events of their transitions; at its
//! end the events are written, dependents of finished tasks are resolved and
//! dead-letter notices filed (in Rust: MySQL triggers cannot change the table
//! that fired them), then it commits. A job that loses a deadlock is run again.
//!
//! Leasing reads its candidates with `SELECT ... FOR UPDATE SKIP LOCKED` (one
//! index-ordered read per queue) and leases them with UPDATEs by primary key in
//! the same transaction (MySQL has no UPDATE ... RETURNING), so replicas never
//! hand out the same task and never wait on each other's rows. The statements
//! are in `lease.rs`.
//!
//! Wake-ups across replicas (there is no LISTEN/NOTIFY): every event gets its id
//! from one counter row, `event_seq`, which each replica polls (`listen.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::{Executor, MySql, MySqlPool, Transaction};
use tokio_util::sync::CancellationToken;

use super::*;

/// This backend's statements, from the `.sql` files of this folder.
pub(crate) mod sql {
    include!(concat!(env!("OUT_DIR"), "/store_sql_mysql.rs"));
}

mod admin;
mod admission;
mod checksums;
mod events;
mod flow;
mod key_waits;
mod lease;
mod listen;
mod migrate;
mod observe;
mod ops;
mod packet;
mod read;
mod routing;
mod schedule;
mod sync_match;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/mysql");

/// The columns of a `tasks` row as `TaskRow` reads them (`key` is a reserved word).
pub(crate) const TASK_COLUMNS: &str = "seq, id, queue, `key`, payload, priority, run_at, \
    deadline, state, attempt, max_attempts, attempts_allowed, initial_backoff_ms, \
    backoff_multiplier, max_backoff_ms, jitter, metadata, created_at, updated_at, last_error, \
    checkpoint, result, leased_by, lease_token, lease_duration_ms, lease_expires_at, \
    fencing_token, finished_at, cancel_requested, leased_at, leased_address, schedule_id, \
    fire_time, target_worker, target_labels, sticky, sticky_timeout_ms, reserved_for, \
    reserved_until, fanout_group, fanout_distinct, concurrency_key, retry_schedule";

/// How long a store call waits for a pooled connection. While the database is
/// gone, sqlx keeps retrying a refused connection until then: this is how long
/// the first calls take to answer UNAVAILABLE.
pub(crate) const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a write waits for a connection once a write has found none (the
/// database is gone, or every connection stayed busy for [`ACQUIRE_TIMEOUT`]),
/// until a write gets one again. Writes queue behind each other (a Submit
/// waits for the combined insert in flight before its own): without this, each
/// of them would wait the full [`ACQUIRE_TIMEOUT`] during an outage. A database
/// that is back is reached well within it (sqlx retries a refused connection
/// after 10 ms, then 20, 40, ...).
pub(crate) const ACQUIRE_WHILE_DOWN: Duration = Duration::from_secs(1);

pub struct MysqlStore {
    pool: MySqlPool,
    /// The last write found no connection (see [`ACQUIRE_WHILE_DOWN`]).
    down: AtomicBool,
    /// Wakes this replica's long-polls for queues a job of its own made
    /// pending (the poller of `listen.rs` covers the other replicas).
    waker: Arc<OnceLock<Waker>>,
    notes: Arc<listen::Notes>,
    /// Bytes of parameters one statement may carry (`packet.rs`).
    packet: usize,
}

/// One write transaction and what its operations leave for its end.
pub(crate) struct Job {
    pub tx: Transaction<'static, MySql>,
    pub events: Vec<events::Pending>,
    /// Queues that got pending tasks from flow (unblocked, dead letters, bulk requeue).
    pub woken: Vec<String>,
    /// Rows were locked and not taken: other replicas' long-polls must look again.
    pub spare: bool,
    /// A Submit's plain insert, whose broker wakes this replica's waiters
    /// itself: this replica's poller skips its events.
    pub own_wakes: bool,
    /// Bytes of parameters one statement may carry (`packet.rs`).
    pub packet: usize,
}

impl Job {
    pub fn conn(&mut self) -> &mut sqlx::MySqlConnection {
        &mut self.tx
    }
}

/// Whether a failed job may simply run again: it lost a deadlock or a lock wait.
fn retryable(e: &StoreError) -> bool {
    let (StoreError::Internal(b) | StoreError::Unavailable(b)) = e else {
        return false;
    };
    let Some(sqlx::Error::Database(db)) = b.downcast_ref::<sqlx::Error>() else {
        return false;
    };
    db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .is_some_and(|m| matches!(m.number(), 1213 | 1205))
}

/// Runs `$body` (an expression using `$job: &mut Job`) as a job: begun,
/// finished and committed, run again after a deadlock (a few times).
macro_rules! job {
    ($self:ident, |$job:ident| $body:expr) => {{
        let mut tries = 0u32;
        loop {
            let mut job_value = $self.begin().await?;
            let result = {
                let $job = &mut job_value;
                async { $body }.await
            };
            let result = match result {
                Ok(v) => $self.finish(job_value).await.map(|()| v),
                Err(e) => {
                    drop(job_value);
                    Err(e)
                }
            };
            match result {
                Err(e) if tries < 8 && retryable(&e) => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(u64::from(tries))).await;
                }
                other => break other,
            }
        }
    }};
}

impl MysqlStore {
    /// Opens a pool on `mysql://user:pass@host:port/db`.
    pub async fn connect(url: &str, max_connections: u32) -> StoreResult<Self> {
        let opts: MySqlConnectOptions = url.parse()?;
        let pool = MySqlPoolOptions::new()
            .max_connections(max_connections.max(2))
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    // Row locks only on rows read (no gap locks), as on Postgres; a
                    // statement never waits long for a lock another one holds.
                    conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                        .await?;
                    conn.execute("SET SESSION innodb_lock_wait_timeout = 10")
                        .await?;
                    Ok(())
                })
            })
            .connect_with(opts)
            .await?;
        // Multi-row statements are cut to fit it (`packet.rs`).
        let max_allowed_packet: i64 =
            sqlx::query_scalar("SELECT CAST(@@max_allowed_packet AS SIGNED)")
                .fetch_one(&pool)
                .await?;
        Ok(MysqlStore {
            packet: packet::budget(u64::try_from(max_allowed_packet).unwrap_or(0)),
            pool,
            down: AtomicBool::new(false),
            waker: Arc::new(OnceLock::new()),
            notes: Arc::new(listen::Notes::default()),
        })
    }

    pub(crate) async fn begin(&self) -> StoreResult<Job> {
        let tx = if self.down.load(Ordering::Relaxed) {
            match tokio::time::timeout(ACQUIRE_WHILE_DOWN, self.pool.begin()).await {
                Ok(tx) => tx,
                Err(_) => Err(sqlx::Error::PoolTimedOut),
            }
        } else {
            self.pool.begin().await
        };
        let tx = tx.map_err(StoreError::from).inspect_err(|e| {
            if matches!(e, StoreError::Unavailable(_)) {
                self.down.store(true, Ordering::Relaxed);
            }
        })?;
        self.down.store(false, Ordering::Relaxed);
        Ok(Job {
            tx,
            events: Vec::new(),
            woken: Vec::new(),
            spare: false,
            own_wakes: false,
            packet: self.packet,
        })
    }

    /// Ends a job: flow's follow-ups and the events, then the commit, then the
    /// local wake-ups.
    pub(crate) async fn finish(&self, mut job: Job) -> StoreResult<()> {
        let ids = events::after_job(&mut job).await?;
        job.tx.commit().await?;
        if let Some(ids) = ids.filter(|_| job.own_wakes) {
            // This replica's poller does not wake for them again.
            self.notes.own(ids);
        }
        if let Some(wake) = self.waker.get() {
            job.woken.sort_unstable();
            job.woken.dedup();
            for q in &job.woken {
                wake(Some(q));
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Engine for MysqlStore {
    fn backend(&self) -> &'static str {
        "mysql"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { shared: true }
    }

    async fn migrate(&self) -> StoreResult<()> {
        checksums::rewrite_earlier(&self.pool, &MIGRATOR)
            .await
            .map_err(|e| StoreError::Migrate(e.into()))?;
        migrate::run(&MIGRATOR, &self.pool).await
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    fn pool_stats(&self) -> PoolStats {
        PoolStats {
            size: self.pool.size(),
            idle: self.pool.num_idle(),
        }
    }

    fn spawn_listener(&self, wake: Waker, stop: CancellationToken) {
        let _ = self.waker.set(wake.clone());
        listen::spawn(self.pool.clone(), wake, stop, self.notes.clone());
    }

    fn notification_stats(&self) -> NotificationStats {
        self.notes.stats()
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}

#[async_trait]
impl Tasks for MysqlStore {
    async fn task_insert_many(
        &self,
        tasks: &[NewTask],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<Inserted>> {
        job!(self, |j| {
            j.own_wakes = true;
            ops::task_insert_many(j, tasks, now).await
        })
    }

    async fn task_get(&self, task_id: &str) -> StoreResult<Option<TaskRecord>> {
        read::task_get(&self.pool, task_id).await
    }

    async fn task_find_keys(&self, keys: &[(String, String)]) -> StoreResult<Vec<TaskRecord>> {
        read::task_find_keys(&self.pool, keys).await
    }

    async fn task_queues(
        &self,
        task_ids: &[String],
    ) -> StoreResult<std::collections::HashMap<String, String>> {
        read::task_queues(&self.pool, task_ids).await
    }

    async fn task_list(&self, f: &TaskFilter) -> StoreResult<Vec<TaskRecord>> {
        read::task_list(&self.pool, f).await
    }

    async fn task_update(
        &self,
        task_id: &str,
        u: &TaskUpdate,
        now: DateTime<Utc>,
    ) -> StoreResult<Changed> {
        job!(self, |j| admin::task_update(j, task_id, u, now).await)
    }

    async fn task_replace_waiting(
        &self,
        r: &Replacement,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<String>> {
        job!(self, |j| admin::task_replace_waiting(j, r, now).await)
    }

    async fn attempt_list(&self, task_id: &str) -> StoreResult<Option<Vec<AttemptRecord>>> {
        read::attempt_list(&self.pool, task_id).await
    }

    async fn task_insert_flow(
        &self,
        tasks: &[NewTask],
        flows: &[FlowSpec],
        now: DateTime<Utc>,
        commit_by: Option<std::time::Instant>,
    ) -> StoreResult<FlowInserted> {
        let mut tries = 0u32;
        loop {
            let mut j = self.begin().await?;
            let r = flow::insert(&mut j, tasks, flows, now).await;
            let r = match r {
                Ok(FlowInserted::Done(v)) => {
                    if commit_by.is_some_and(|d| std::time::Instant::now() >= d) {
                        // Rolled back: nothing is inserted.
                        drop(j);
                        return Ok(FlowInserted::DeadlinePassed);
                    }
                    self.finish(j).await.map(|()| FlowInserted::Done(v))
                }
                Ok(other) => return Ok(other),
                Err(e) => Err(e),
            };
            match r {
                Err(e) if tries < 8 && retryable(&e) => tries += 1,
                other => return other,
            }
        }
    }

    async fn task_insert_matched(
        &self,
        tasks: &[NewTask],
        matches: &[Option<MatchTo>],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<MatchedInsert>> {
        job!(self, |j| sync_match::task_insert_matched(
            j, tasks, matches, now
        )
        .await)
    }
}

#[async_trait]
impl Leasing for MysqlStore {
    async fn task_lease_available(&self, p: &LeaseParams) -> StoreResult<Vec<TaskRecord>> {
        job!(self, |j| lease::lease(j, p).await)
    }

    async fn task_lease_many(&self, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>> {
        job!(self, |j| lease::lease_many(j, ps).await)
    }

    async fn task_next_run_at(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        read::task_next_run_at(&self.pool, queues, now).await
    }

    async fn lease_extend(
        &self,
        leases: &[LeaseRef],
        extend_by: Option<Duration>,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<LeaseState>> {
        job!(self, |j| ops::lease_extend(j, leases, extend_by, now).await)
    }

    async fn task_lease_gated(&self, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>> {
        job!(self, |j| lease::lease_gated(j, ps).await)
    }

    async fn lease_release(&self, leases: &[LeaseRef], now: DateTime<Utc>) -> StoreResult<u64> {
        job!(self, |j| sync_match::lease_release(j, leases, now).await)
    }
}

#[async_trait]
impl Settling for MysqlStore {
    async fn task_checkpoint(&self, p: &CheckpointParams) -> StoreResult<Settled<LeaseState>> {
        job!(self, |j| ops::task_checkpoint(j, p).await)
    }

    async fn task_complete(&self, p: &CompleteParams) -> StoreResult<Settled<Completed>> {
        job!(self, |j| ops::task_complete(j, p).await)
    }

    async fn task_complete_many(
        &self,
        ps: &[CompleteParams],
    ) -> StoreResult<Vec<Settled<Completed>>> {
        job!(self, |j| ops::task_complete_many(j, ps).await)
    }

    async fn task_fail(&self, p: &FailParams) -> StoreResult<Settled<FailResult>> {
        job!(self, |j| ops::task_fail(j, p).await)
    }

    async fn lease_reclaim_expired(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Reaped> {
        job!(self, |j| admin::lease_reclaim_expired(j, now, limit).await)
    }
}

#[async_trait]
impl Flow for MysqlStore {
    async fn task_flow_info(
        &self,
        task_ids: &[String],
    ) -> StoreResult<std::collections::HashMap<String, TaskFlowInfo>> {
        flow::flow_info(&self.pool, task_ids).await
    }

    async fn task_keys_missing(&self, task_id: &str, limit: u32) -> StoreResult<Vec<TaskKey>> {
        flow::keys_missing(&self.pool, task_id, limit).await
    }

    async fn task_dependency_result_sizes(
        &self,
        task_ids: &[String],
    ) -> StoreResult<Vec<(String, u64, u64)>> {
        flow::dependency_result_sizes(&self.pool, task_ids).await
    }

    async fn task_dependency_results(
        &self,
        task_ids: &[String],
    ) -> StoreResult<Vec<(String, String, Vec<u8>)>> {
        flow::dependency_results(&self.pool, task_ids).await
    }

    async fn task_deps_unfinished(&self, task_id: &str, limit: u32) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT depends_on FROM task_deps WHERE task_id = ? AND NOT resolved \
             ORDER BY depends_on LIMIT ?",
        )
        .bind(task_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?)
    }
}

#[async_trait]
impl Events for MysqlStore {
    async fn event_list(
        &self,
        task_id: &str,
        after_event_id: i64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>> {
        flow::event_list(&self.pool, task_id, after_event_id, limit).await
    }

    async fn event_read(&self, after_event_id: i64, limit: u32) -> StoreResult<Vec<EventRecord>> {
        flow::event_read(&self.pool, after_event_id, limit).await
    }

    async fn event_head(&self) -> StoreResult<i64> {
        flow::event_head(&self.pool).await
    }

    async fn event_purge(&self, before: DateTime<Utc>, limit: u32) -> StoreResult<u64> {
        flow::event_purge(&self.pool, before, limit).await
    }
}

#[async_trait]
impl Schedules for MysqlStore {
    async fn schedule_insert(&self, s: &ScheduleRecord) -> StoreResult<bool> {
        schedule::insert(&self.pool, s).await
    }

    async fn schedule_get(&self, id: &str) -> StoreResult<Option<ScheduleRecord>> {
        schedule::get(&self.pool, id).await
    }

    async fn schedule_list(&self, f: &ScheduleFilter) -> StoreResult<Vec<ScheduleRecord>> {
        schedule::list(&self.pool, f).await
    }

    async fn schedule_update(&self, s: &ScheduleRecord, now: DateTime<Utc>) -> StoreResult<bool> {
        schedule::update(&self.pool, s, now).await
    }

    async fn schedule_delete(&self, id: &str) -> StoreResult<bool> {
        schedule::delete(&self.pool, id).await
    }

    async fn schedule_due(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Vec<DueSchedule>> {
        schedule::due(&self.pool, now, limit).await
    }

    async fn schedule_fire(&self, f: &ScheduleFire) -> StoreResult<Fired> {
        job!(self, |j| schedule::fire(j, f).await)
    }

    async fn schedule_run_list(
        &self,
        f: &ScheduleRunFilter,
    ) -> StoreResult<Vec<ScheduleRunRecord>> {
        schedule::run_list(&self.pool, f).await
    }
}

#[async_trait]
impl Admission for MysqlStore {
    async fn queue_pending(&self, queue: &str) -> StoreResult<(u64, u64)> {
        read::queue_pending(&self.pool, queue).await
    }

    async fn queue_dead_letters_set(&self, pairs: &[(String, String)]) -> StoreResult<()> {
        job!(self, |j| flow::dead_letters_set(j, pairs).await)
    }

    async fn queue_list(&self) -> StoreResult<Vec<StoredQueue>> {
        admission::queue_list(&self.pool).await
    }

    async fn queue_seed(
        &self,
        seed: &[(String, crate::domain::admission::QueueConfig)],
    ) -> StoreResult<()> {
        job!(self, |j| admission::queue_seed(j, seed).await)
    }

    async fn queue_put(
        &self,
        name: &str,
        config: &crate::domain::admission::QueueConfig,
        version: Option<i64>,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        job!(self, |j| {
            let done = admission::queue_put(j, name, config, version, now).await?;
            if done {
                // Every replica's long-polls of the queue look again.
                j.woken.push(name.to_string());
                j.spare = true;
            }
            Ok(done)
        })
    }

    async fn queue_usage(
        &self,
        queue: &str,
        key: Option<&str>,
        now: DateTime<Utc>,
    ) -> StoreResult<QueueUsage> {
        admission::queue_usage(&self.pool, queue, key, now).await
    }

    async fn task_ahead(
        &self,
        task: &TaskRecord,
        aging_ms: Option<i64>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        admission::task_ahead(&self.pool, task, aging_ms, now).await
    }

    async fn queue_key_tokens_purge(&self, now: DateTime<Utc>) -> StoreResult<u64> {
        job!(self, |j| admission::key_tokens_purge(j, now).await)
    }
}

#[async_trait]
impl Workers for MysqlStore {
    async fn lease_holders(&self, p: &LeaseHolderParams) -> StoreResult<Vec<LeaseHolder>> {
        observe::lease_holders(&self.pool, p).await
    }

    async fn worker_record_seen(&self, seen: &[WorkerSeen]) -> StoreResult<()> {
        routing::worker_record_seen(&self.pool, seen).await
    }

    async fn worker_list(&self, f: &WorkerFilter) -> StoreResult<Vec<WorkerRecord>> {
        routing::worker_list(&self.pool, f).await
    }

    async fn worker_get(
        &self,
        worker_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<(WorkerRecord, Vec<WorkerLeaseRecord>)>> {
        routing::worker_get(&self.pool, worker_id, now).await
    }
}

#[async_trait]
impl Admin for MysqlStore {
    async fn task_cancel(&self, task_id: &str, now: DateTime<Utc>) -> StoreResult<Changed> {
        job!(self, |j| admin::task_cancel(j, task_id, now).await)
    }

    async fn task_requeue(&self, task_id: &str, now: DateTime<Utc>) -> StoreResult<Changed> {
        job!(self, |j| admin::task_requeue(j, task_id, now).await)
    }

    async fn task_purge_finished(
        &self,
        before: DateTime<Utc>,
        scope: &PurgeScope,
        limit: u32,
    ) -> StoreResult<u64> {
        job!(self, |j| admin::task_purge_finished(
            j, before, scope, limit
        )
        .await)
    }

    async fn task_dead_groups(&self, p: &DeadGroupParams) -> StoreResult<Vec<DeadGroup>> {
        observe::task_dead_groups(&self.pool, p).await
    }

    async fn task_requeue_dead(&self, p: &RequeueDeadParams) -> StoreResult<u64> {
        job!(self, |j| observe::task_requeue_dead(j, p).await)
    }

    async fn task_cancel_dead(&self, p: &CancelDeadParams) -> StoreResult<u64> {
        job!(self, |j| observe::task_cancel_dead(j, p).await)
    }

    async fn task_select(&self, f: &BulkFilter) -> StoreResult<Vec<TaskRecord>> {
        flow::select(&self.pool, f).await
    }

    async fn task_cancel_many(
        &self,
        task_ids: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<BulkCancelled> {
        job!(self, |j| flow::cancel_many(j, task_ids, now).await)
    }

    async fn task_requeue_many(
        &self,
        tasks: &[(String, DateTime<Utc>)],
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        job!(self, |j| flow::requeue_many(j, tasks, now).await)
    }
}

#[async_trait]
impl Observe for MysqlStore {
    async fn queue_stats(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<QueueStatsRecord>> {
        read::queue_stats(&self.pool, queues, now).await
    }

    async fn attempt_histogram(
        &self,
        p: &AttemptHistogramParams,
    ) -> StoreResult<Vec<AttemptBucket>> {
        observe::attempt_histogram(&self.pool, p).await
    }

    async fn attempt_durations(
        &self,
        p: &AttemptDurationParams,
    ) -> StoreResult<Vec<AttemptDuration>> {
        observe::attempt_durations(&self.pool, p).await
    }
}
