//! The embedded SQLite store (the default).
//!
//! WAL mode with `synchronous = FULL`: a write is acknowledged only after its
//! transaction is on disk, so it survives `kill -9` and power loss. All writes go
//! through one connection and are group-committed (`writer`); reads use a pool of
//! their own, which WAL lets run beside the writer.
//!
//! - `writer`: the group-commit batcher.
//! - `ops`: the hot-path writes; `admin`: maintenance and operator writes.
//! - `read`: the reads.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::config::DbConfig;
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::*;

/// This backend's statements, from the `.sql` files of this folder.
pub(crate) mod sql {
    include!(concat!(env!("OUT_DIR"), "/store_sql_sqlite.rs"));
}

mod admin;
// Flow: dependencies, events, bulk operations (migration 0010).
mod events;
mod flow;
// Dependencies by key at submit: what a dependent may name, its waits.
mod key_waits;
// Admission (migration 0009).
mod admission;
mod admission_lease;
mod columns;
mod observe;
mod ops;
mod read;
// Routing and the worker registry (migration 0008).
mod routing;
mod schedule;
// Sync match.
mod sync_match;
mod writer;
// Less CPU per task: the plain lease without UPDATE ... RETURNING.
mod lease_plain;

/// The plain lease's per-queue candidate statement (?1 worker, ?2 queue, ?3 the
/// worker's labels as JSON, ?4 now, ?5 how many at most), for the store tests
/// that count the rows it reads.
#[doc(hidden)]
pub fn lease_candidates_sql() -> &'static str {
    lease_plain::candidates_sql()
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

pub struct SqliteStore {
    writer: writer::Writer,
    write_pool: SqlitePool,
    reader: SqlitePool,
}

impl SqliteStore {
    /// Opens (and creates) the database file named by `sqlite://PATH`.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let opts = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(5));
        let write_pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts.clone())
            .await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(opts.clone().read_only(true))
            .await?;
        let conn = open_writer(opts.get_filename())?;
        let checkpoint = open_connection(opts.get_filename())?;
        let writer = writer::Writer::start(conn, checkpoint)
            .map_err(|e| StoreError::Internal(format!("cannot start the writer: {e}").into()))?;
        Ok(SqliteStore {
            writer,
            write_pool,
            reader,
        })
    }
}

/// A connection with the same durability settings as the pools.
fn open_connection(path: &std::path::Path) -> StoreResult<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    Ok(conn)
}

/// The writer's connection. Checkpoints are the checkpointer thread's job; the
/// writer checkpoints itself only if the WAL grows past ~64 MiB regardless.
fn open_writer(path: &std::path::Path) -> StoreResult<rusqlite::Connection> {
    let conn = open_connection(path)?;
    conn.pragma_update(None, "wal_autocheckpoint", 16384)?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.pragma_update(None, "cache_size", -32768)?;
    // Plans must not depend on bound values: otherwise SQLite (built with STAT4)
    // marks the lease statement to be re-prepared whenever `now` changes, and
    // compiling it again cost more than running it (half the writer's time in
    // per-task runs).
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    // The lease statement differs by the number of queues asked for; keep many.
    conn.set_prepared_statement_cache_capacity(128);
    Ok(conn)
}

/// Runs `$op` (a function of `ops` or `admin` taking the connection first) in the
/// writer's next batch, with owned copies of its arguments.
macro_rules! write {
    ($self:ident, $op:path, [$($arg:ident),*], $($call:expr),*) => {{
        $(let $arg = $arg.to_owned();)*
        $self
            .writer
            .write(move |c| $op(c, $($call),*))
            .await
    }};
}

#[async_trait]
impl Engine for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR
            .run(&self.write_pool)
            .await
            .map_err(StoreError::Migrate)
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        Ok(())
    }

    fn pool_stats(&self) -> PoolStats {
        PoolStats {
            size: self.write_pool.size() + self.reader.size(),
            idle: self.write_pool.num_idle() + self.reader.num_idle(),
        }
    }

    async fn close(&self) {
        self.write_pool.close().await;
        self.reader.close().await;
    }

    /// Flow: wakes long-polls for tasks unblocked (or requeued in bulk) by
    /// the writer; the writer thread calls it after each commit.
    fn spawn_listener(&self, wake: Waker, _stop: tokio_util::sync::CancellationToken) {
        let writer = self.writer.clone();
        tokio::spawn(async move {
            if let Err(e) = writer
                .write(move |_| {
                    flow::set_waker(wake);
                    Ok(())
                })
                .await
            {
                tracing::warn!(error = %e, "cannot install the writer's wake-up");
            }
        });
    }
}

#[async_trait]
impl Tasks for SqliteStore {
    async fn task_insert_many(
        &self,
        tasks: &[NewTask],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<Inserted>> {
        write!(self, ops::task_insert_many, [tasks], &tasks, now)
    }

    async fn task_get(&self, task_id: &str) -> StoreResult<Option<TaskRecord>> {
        read::task_get(&self.reader, task_id).await
    }

    async fn task_find_keys(&self, keys: &[(String, String)]) -> StoreResult<Vec<TaskRecord>> {
        read::task_find_keys(&self.reader, keys).await
    }

    async fn task_queues(
        &self,
        task_ids: &[String],
    ) -> StoreResult<std::collections::HashMap<String, String>> {
        read::task_queues(&self.reader, task_ids).await
    }

    async fn task_list(&self, filter: &TaskFilter) -> StoreResult<Vec<TaskRecord>> {
        read::task_list(&self.reader, filter).await
    }

    async fn task_update(
        &self,
        task_id: &str,
        update: &TaskUpdate,
        now: DateTime<Utc>,
    ) -> StoreResult<Changed> {
        write!(
            self,
            admin::task_update,
            [task_id, update],
            &task_id,
            &update,
            now
        )
    }

    async fn task_replace_waiting(
        &self,
        r: &Replacement,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<String>> {
        write!(self, admin::task_replace_waiting, [r], &r, now)
    }

    async fn attempt_list(&self, task_id: &str) -> StoreResult<Option<Vec<AttemptRecord>>> {
        read::attempt_list(&self.reader, task_id).await
    }

    async fn task_insert_flow(
        &self,
        tasks: &[NewTask],
        flows: &[FlowSpec],
        now: DateTime<Utc>,
        commit_by: Option<std::time::Instant>,
    ) -> StoreResult<FlowInserted> {
        write!(
            self,
            flow::insert,
            [tasks, flows],
            &tasks,
            &flows,
            now,
            commit_by
        )
    }

    async fn task_insert_matched(
        &self,
        tasks: &[NewTask],
        matches: &[Option<MatchTo>],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<MatchedInsert>> {
        write!(
            self,
            sync_match::task_insert_matched,
            [tasks, matches],
            &tasks,
            &matches,
            now
        )
    }
}

#[async_trait]
impl Leasing for SqliteStore {
    async fn task_lease_available(&self, p: &LeaseParams) -> StoreResult<Vec<TaskRecord>> {
        write!(self, ops::task_lease_available, [p], &p)
    }

    async fn task_lease_many(&self, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>> {
        write!(self, ops::task_lease_many, [ps], &ps)
    }

    async fn task_next_run_at(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        read::task_next_run_at(&self.reader, queues, now).await
    }

    async fn lease_extend(
        &self,
        leases: &[LeaseRef],
        extend_by: Option<Duration>,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<LeaseState>> {
        write!(self, ops::lease_extend, [leases], &leases, extend_by, now)
    }

    async fn task_lease_gated(&self, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>> {
        write!(self, admission_lease::task_lease_gated, [ps], &ps)
    }

    async fn lease_release(&self, leases: &[LeaseRef], now: DateTime<Utc>) -> StoreResult<u64> {
        write!(self, sync_match::lease_release, [leases], &leases, now)
    }
}

#[async_trait]
impl Settling for SqliteStore {
    async fn task_checkpoint(&self, p: &CheckpointParams) -> StoreResult<Settled<LeaseState>> {
        write!(self, ops::task_checkpoint, [p], &p)
    }

    async fn task_complete(&self, p: &CompleteParams) -> StoreResult<Settled<Completed>> {
        write!(self, ops::task_complete, [p], &p)
    }

    async fn task_complete_many(
        &self,
        ps: &[CompleteParams],
    ) -> StoreResult<Vec<Settled<Completed>>> {
        write!(self, ops::task_complete_many, [ps], &ps)
    }

    async fn task_fail(&self, p: &FailParams) -> StoreResult<Settled<FailResult>> {
        write!(self, ops::task_fail, [p], &p)
    }

    async fn lease_reclaim_expired(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Reaped> {
        write!(self, admin::lease_reclaim_expired, [], now, limit)
    }
}

#[async_trait]
impl Flow for SqliteStore {
    async fn task_flow_info(
        &self,
        task_ids: &[String],
    ) -> StoreResult<std::collections::HashMap<String, TaskFlowInfo>> {
        flow::flow_info(&self.reader, task_ids).await
    }

    async fn task_keys_missing(&self, task_id: &str, limit: u32) -> StoreResult<Vec<TaskKey>> {
        flow::keys_missing(&self.reader, task_id, limit).await
    }

    async fn task_dependency_result_sizes(
        &self,
        task_ids: &[String],
    ) -> StoreResult<Vec<(String, u64, u64)>> {
        flow::dependency_result_sizes(&self.reader, task_ids).await
    }

    async fn task_dependency_results(
        &self,
        task_ids: &[String],
    ) -> StoreResult<Vec<(String, String, Vec<u8>)>> {
        flow::dependency_results(&self.reader, task_ids).await
    }

    async fn task_deps_unfinished(&self, task_id: &str, limit: u32) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT depends_on FROM task_deps WHERE task_id = ? AND NOT resolved \
             ORDER BY depends_on LIMIT ?",
        )
        .bind(task_id)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?)
    }
}

#[async_trait]
impl Events for SqliteStore {
    async fn event_list(
        &self,
        task_id: &str,
        after_event_id: i64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>> {
        flow::event_list(&self.reader, task_id, after_event_id, limit).await
    }

    async fn event_read(&self, after_event_id: i64, limit: u32) -> StoreResult<Vec<EventRecord>> {
        flow::event_read(&self.reader, after_event_id, limit).await
    }

    async fn event_head(&self) -> StoreResult<i64> {
        flow::event_head(&self.reader).await
    }

    async fn event_purge(&self, before: DateTime<Utc>, limit: u32) -> StoreResult<u64> {
        write!(self, flow::event_purge, [], before, limit)
    }
}

#[async_trait]
impl Schedules for SqliteStore {
    async fn schedule_insert(&self, s: &ScheduleRecord) -> StoreResult<bool> {
        write!(self, schedule::schedule_insert, [s], &s)
    }

    async fn schedule_get(&self, id: &str) -> StoreResult<Option<ScheduleRecord>> {
        schedule::schedule_get(&self.reader, id).await
    }

    async fn schedule_list(&self, f: &ScheduleFilter) -> StoreResult<Vec<ScheduleRecord>> {
        schedule::schedule_list(&self.reader, f).await
    }

    async fn schedule_update(&self, s: &ScheduleRecord, now: DateTime<Utc>) -> StoreResult<bool> {
        write!(self, schedule::schedule_update, [s], &s, now)
    }

    async fn schedule_delete(&self, id: &str) -> StoreResult<bool> {
        write!(self, schedule::schedule_delete, [id], &id)
    }

    async fn schedule_due(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Vec<DueSchedule>> {
        schedule::schedule_due(&self.reader, now, limit).await
    }

    async fn schedule_fire(&self, f: &ScheduleFire) -> StoreResult<Fired> {
        write!(self, schedule::schedule_fire, [f], &f)
    }

    async fn schedule_run_list(
        &self,
        f: &ScheduleRunFilter,
    ) -> StoreResult<Vec<ScheduleRunRecord>> {
        schedule::schedule_run_list(&self.reader, f).await
    }
}

#[async_trait]
impl Admission for SqliteStore {
    async fn queue_pending(&self, queue: &str) -> StoreResult<(u64, u64)> {
        read::queue_pending(&self.reader, queue).await
    }

    async fn queue_dead_letters_set(&self, pairs: &[(String, String)]) -> StoreResult<()> {
        write!(self, flow::dead_letters_set, [pairs], &pairs)
    }

    async fn queue_list(&self) -> StoreResult<Vec<StoredQueue>> {
        admission::queue_list(&self.reader).await
    }

    async fn queue_seed(
        &self,
        seed: &[(String, crate::domain::admission::QueueConfig)],
    ) -> StoreResult<()> {
        write!(self, admission::queue_seed, [seed], &seed)
    }

    async fn queue_put(
        &self,
        name: &str,
        config: &crate::domain::admission::QueueConfig,
        version: Option<i64>,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        write!(
            self,
            admission::queue_put,
            [name, config],
            &name,
            &config,
            version,
            now
        )
    }

    async fn queue_usage(
        &self,
        queue: &str,
        key: Option<&str>,
        now: DateTime<Utc>,
    ) -> StoreResult<QueueUsage> {
        admission::queue_usage(&self.reader, queue, key, now).await
    }

    async fn task_ahead(
        &self,
        task: &TaskRecord,
        aging_ms: Option<i64>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        admission::task_ahead(&self.reader, task, aging_ms, now).await
    }

    async fn queue_key_tokens_purge(&self, now: DateTime<Utc>) -> StoreResult<u64> {
        write!(self, admission::key_tokens_purge, [], now)
    }
}

#[async_trait]
impl Workers for SqliteStore {
    async fn lease_holders(&self, p: &LeaseHolderParams) -> StoreResult<Vec<LeaseHolder>> {
        observe::lease_holders(&self.reader, p).await
    }

    async fn worker_record_seen(&self, seen: &[WorkerSeen]) -> StoreResult<()> {
        write!(self, routing::worker_record_seen, [seen], &seen)
    }

    async fn worker_list(&self, f: &WorkerFilter) -> StoreResult<Vec<WorkerRecord>> {
        routing::worker_list(&self.reader, f).await
    }

    async fn worker_get(
        &self,
        worker_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<(WorkerRecord, Vec<WorkerLeaseRecord>)>> {
        routing::worker_get(&self.reader, worker_id, now).await
    }
}

#[async_trait]
impl Admin for SqliteStore {
    async fn task_cancel(&self, task_id: &str, now: DateTime<Utc>) -> StoreResult<Changed> {
        write!(self, admin::task_cancel, [task_id], &task_id, now)
    }

    async fn task_requeue(&self, task_id: &str, now: DateTime<Utc>) -> StoreResult<Changed> {
        write!(self, admin::task_requeue, [task_id], &task_id, now)
    }

    async fn task_purge_finished(
        &self,
        before: DateTime<Utc>,
        scope: &PurgeScope,
        limit: u32,
    ) -> StoreResult<u64> {
        write!(
            self,
            admin::task_purge_finished,
            [scope],
            before,
            &scope,
            limit
        )
    }

    async fn task_dead_groups(&self, p: &DeadGroupParams) -> StoreResult<Vec<DeadGroup>> {
        observe::task_dead_groups(&self.reader, p).await
    }

    async fn task_requeue_dead(&self, p: &RequeueDeadParams) -> StoreResult<u64> {
        write!(self, observe::task_requeue_dead, [p], &p)
    }

    async fn task_cancel_dead(&self, p: &CancelDeadParams) -> StoreResult<u64> {
        write!(self, observe::task_cancel_dead, [p], &p)
    }

    async fn task_select(&self, f: &BulkFilter) -> StoreResult<Vec<TaskRecord>> {
        flow::select(&self.reader, f).await
    }

    async fn task_cancel_many(
        &self,
        task_ids: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<BulkCancelled> {
        write!(self, flow::cancel_many, [task_ids], &task_ids, now)
    }

    async fn task_requeue_many(
        &self,
        tasks: &[(String, DateTime<Utc>)],
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        write!(self, flow::requeue_many, [tasks], &tasks, now)
    }
}

#[async_trait]
impl Observe for SqliteStore {
    async fn queue_stats(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<QueueStatsRecord>> {
        read::queue_stats(&self.reader, queues, now).await
    }

    async fn attempt_histogram(
        &self,
        p: &AttemptHistogramParams,
    ) -> StoreResult<Vec<AttemptBucket>> {
        observe::attempt_histogram(&self.reader, p).await
    }

    async fn attempt_durations(
        &self,
        p: &AttemptDurationParams,
    ) -> StoreResult<Vec<AttemptDuration>> {
        observe::attempt_durations(&self.reader, p).await
    }
}
