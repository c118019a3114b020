//! The embedded SQLite store (the default).
//!
//! WAL mode with `synchronous = FULL`: a Submit is acknowledged only after its
//! transaction is on disk, so it survives `kill -9` and power loss. All writes go
//! through one connection (SQLite has one writer anyway, and this avoids
//! SQLITE_BUSY upgrades); reads use a pool of their own.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool, Transaction};

use super::row::{
    AttemptRow, FailureWrite, TaskRow, decide, duration_ms, from_ms, ms, sort_lease_order,
    state_filter_sql,
};
use super::*;
use crate::domain::task::{Report, SettleCheck, lease_is_live, settle_check};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

pub struct SqliteStore {
    writer: SqlitePool,
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
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts.clone())
            .await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(opts.read_only(true))
            .await?;
        Ok(SqliteStore { writer, reader })
    }

    async fn fetch_task(
        tx: &mut Transaction<'_, Sqlite>,
        id: &str,
    ) -> StoreResult<Option<TaskRow>> {
        Ok(
            sqlx::query_as::<_, TaskRow>("SELECT * FROM tasks WHERE id = ?")
                .bind(id)
                .fetch_optional(&mut **tx)
                .await?,
        )
    }

    async fn latest_outcome(
        tx: &mut Transaction<'_, Sqlite>,
        row: &TaskRow,
    ) -> StoreResult<Option<AttemptOutcome>> {
        let outcome: Option<String> = sqlx::query_scalar(
            "SELECT outcome FROM task_attempts WHERE task_id = ? AND attempt = ?",
        )
        .bind(&row.id)
        .bind(row.attempt)
        .fetch_optional(&mut **tx)
        .await?;
        Ok(outcome.as_deref().and_then(AttemptOutcome::parse))
    }

    /// Settle checks need the latest attempt's outcome only when the task is no longer leased.
    async fn check(
        tx: &mut Transaction<'_, Sqlite>,
        row: &TaskRow,
        report: Report,
        token: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<SettleCheck> {
        let state = row.stored_state()?;
        let outcome = if state == StoredState::Leased {
            None
        } else {
            Self::latest_outcome(tx, row).await?
        };
        Ok(settle_check(
            state,
            row.lease_token.as_deref(),
            row.lease_expires_at.map(from_ms),
            outcome,
            report,
            token,
            now,
        ))
    }

    async fn finish_attempt(
        tx: &mut Transaction<'_, Sqlite>,
        task_id: &str,
        attempt: i64,
        outcome: AttemptOutcome,
        error: Option<&str>,
        now: i64,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        let leased_at: Option<i64> = sqlx::query_scalar(
            "UPDATE task_attempts SET outcome = ?, error = ?, finished_at = ? \
             WHERE task_id = ? AND attempt = ? RETURNING leased_at",
        )
        .bind(outcome.as_str())
        .bind(error)
        .bind(now)
        .bind(task_id)
        .bind(attempt)
        .fetch_optional(&mut **tx)
        .await?;
        Ok(leased_at.map(from_ms))
    }

    /// Writes a failed attempt: task state per the retry policy and the attempt row.
    async fn write_failure(
        tx: &mut Transaction<'_, Sqlite>,
        row: &TaskRow,
        write: &FailureWrite,
        error: &str,
        outcome: AttemptOutcome,
        now: i64,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        sqlx::query(
            "UPDATE tasks SET state = ?, run_at = ?, finished_at = ?, last_error = ?, \
             lease_expires_at = NULL, updated_at = ? WHERE seq = ?",
        )
        .bind(write.state.as_str())
        .bind(write.run_at)
        .bind(write.finished_at)
        .bind(error)
        .bind(now)
        .bind(row.seq)
        .execute(&mut **tx)
        .await?;
        Self::finish_attempt(tx, &row.id, row.attempt, outcome, Some(error), now).await
    }

    async fn changed(tx: &mut Transaction<'_, Sqlite>, id: &str) -> StoreResult<Changed> {
        match Self::fetch_task(tx, id).await? {
            Some(row) => Ok(Changed::Done(Box::new(row.into_record()?))),
            None => Ok(Changed::NotFound),
        }
    }
}

fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR
            .run(&self.writer)
            .await
            .map_err(StoreError::Migrate)
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        Ok(())
    }

    async fn task_insert_many(
        &self,
        tasks: &[NewTask],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<Inserted>> {
        let now = ms(now);
        let mut tx = self.writer.begin().await?;
        let mut out = Vec::with_capacity(tasks.len());
        for t in tasks {
            let metadata = serde_json::to_string(&t.metadata).unwrap_or_else(|_| "{}".into());
            let inserted: Option<String> = sqlx::query_scalar(
                "INSERT INTO tasks (id, queue, key, payload, priority, run_at, deadline, state, \
                 max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier, \
                 max_backoff_ms, jitter, metadata, created_at, updated_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?) \
                 ON CONFLICT DO NOTHING RETURNING id",
            )
            .bind(&t.id)
            .bind(&t.queue)
            .bind(&t.key)
            .bind(&t.payload)
            .bind(t.priority)
            .bind(ms(t.run_at))
            .bind(t.deadline.map(ms))
            .bind(t.retry.max_attempts)
            .bind(t.retry.max_attempts)
            .bind(duration_ms(t.retry.initial_backoff))
            .bind(t.retry.backoff_multiplier)
            .bind(duration_ms(t.retry.max_backoff))
            .bind(t.retry.jitter)
            .bind(metadata)
            .bind(now)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
            let result = match inserted {
                Some(task_id) => Inserted {
                    task_id,
                    deduplicated: false,
                },
                None => {
                    let task_id: String =
                        sqlx::query_scalar("SELECT id FROM tasks WHERE queue = ? AND key = ?")
                            .bind(&t.queue)
                            .bind(&t.key)
                            .fetch_optional(&mut *tx)
                            .await?
                            .ok_or_else(|| StoreError::Corrupt(format!("id {} collided", t.id)))?;
                    Inserted {
                        task_id,
                        deduplicated: true,
                    }
                }
            };
            out.push(result);
        }
        tx.commit().await?;
        Ok(out)
    }

    async fn task_lease_available(&self, p: &LeaseParams) -> StoreResult<Vec<TaskRecord>> {
        let now = ms(p.now);
        let expires = now.saturating_add(duration_ms(p.lease_duration));
        let sql = format!(
            "UPDATE tasks SET state = 'leased', attempt = attempt + 1, \
             fencing_token = fencing_token + 1, lease_token = lower(hex(randomblob(16))), \
             leased_by = ?, lease_duration_ms = ?, \
             lease_expires_at = MIN(?, COALESCE(deadline, 9223372036854775807)), updated_at = ? \
             WHERE seq IN (SELECT seq FROM tasks WHERE state = 'pending' AND queue IN ({}) \
               AND run_at <= ? AND (deadline IS NULL OR deadline > ?) \
               ORDER BY priority DESC, deadline IS NULL, deadline, run_at, seq LIMIT ?) \
             RETURNING *",
            placeholders(p.queues.len())
        );
        let mut tx = self.writer.begin().await?;
        let mut q = sqlx::query_as::<_, TaskRow>(sqlx::AssertSqlSafe(sql))
            .bind(&p.worker_id)
            .bind(duration_ms(p.lease_duration))
            .bind(expires)
            .bind(now);
        for queue in &p.queues {
            q = q.bind(queue);
        }
        let rows = q
            .bind(now)
            .bind(now)
            .bind(p.max_tasks)
            .fetch_all(&mut *tx)
            .await?;
        for row in &rows {
            sqlx::query(
                "INSERT INTO task_attempts (task_id, attempt, worker_id, worker_address, \
                 leased_at, outcome, fencing_token) VALUES (?, ?, ?, ?, ?, 'running', ?)",
            )
            .bind(&row.id)
            .bind(row.attempt)
            .bind(&p.worker_id)
            .bind(&p.worker_address)
            .bind(now)
            .bind(row.fencing_token)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        let mut records = rows
            .into_iter()
            .map(TaskRow::into_record)
            .collect::<StoreResult<Vec<_>>>()?;
        sort_lease_order(&mut records);
        Ok(records)
    }

    async fn task_next_run_at(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        let sql = format!(
            "SELECT MIN(run_at) FROM tasks WHERE state = 'pending' AND queue IN ({}) AND run_at > ?",
            placeholders(queues.len())
        );
        let mut q = sqlx::query_scalar::<_, Option<i64>>(sqlx::AssertSqlSafe(sql));
        for queue in queues {
            q = q.bind(queue);
        }
        let next = q.bind(ms(now)).fetch_one(&self.reader).await?;
        Ok(next.map(from_ms))
    }

    async fn lease_extend(
        &self,
        leases: &[LeaseRef],
        extend_by: Option<Duration>,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<LeaseState>> {
        let now = ms(now);
        let ext = extend_by.map(duration_ms);
        let mut tx = self.writer.begin().await?;
        let mut out = Vec::with_capacity(leases.len());
        for l in leases {
            let row: Option<(i64, bool)> = sqlx::query_as(
                "UPDATE tasks SET lease_expires_at = \
                   MIN(? + COALESCE(?, lease_duration_ms), COALESCE(deadline, 9223372036854775807)), \
                   updated_at = ? \
                 WHERE id = ? AND state = 'leased' AND lease_token = ? AND lease_expires_at > ? \
                   AND (deadline IS NULL OR deadline > ?) \
                 RETURNING lease_expires_at, cancel_requested",
            )
            .bind(now)
            .bind(ext)
            .bind(now)
            .bind(&l.task_id)
            .bind(&l.lease_token)
            .bind(now)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
            out.push(match row {
                Some((at, cancel_requested)) => LeaseState::Live {
                    lease_expires_at: from_ms(at),
                    cancel_requested,
                },
                None => LeaseState::Lost,
            });
        }
        tx.commit().await?;
        Ok(out)
    }

    async fn task_checkpoint(&self, p: &CheckpointParams) -> StoreResult<Settled<LeaseState>> {
        let now = ms(p.now);
        let mut tx = self.writer.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, &p.task_id).await? else {
            return Ok(Settled::NotFound);
        };
        let live = lease_is_live(
            row.stored_state()?,
            row.lease_token.as_deref(),
            row.lease_expires_at.map(from_ms),
            &p.lease_token,
            p.now,
        );
        if !live {
            return Ok(Settled::LeaseLost);
        }
        let (at, cancel_requested): (i64, bool) = sqlx::query_as(
            "UPDATE tasks SET checkpoint = ?, lease_expires_at = CASE WHEN ? IS NULL \
               THEN lease_expires_at ELSE MIN(? + ?, COALESCE(deadline, 9223372036854775807)) END, \
               updated_at = ? WHERE seq = ? RETURNING lease_expires_at, cancel_requested",
        )
        .bind(&p.checkpoint)
        .bind(p.extend_by.map(duration_ms))
        .bind(now)
        .bind(p.extend_by.map(duration_ms))
        .bind(now)
        .bind(row.seq)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Settled::Applied(LeaseState::Live {
            lease_expires_at: from_ms(at),
            cancel_requested,
        }))
    }

    async fn task_complete(&self, p: &CompleteParams) -> StoreResult<Settled<Completed>> {
        let now = ms(p.now);
        let mut tx = self.writer.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, &p.task_id).await? else {
            return Ok(Settled::NotFound);
        };
        match Self::check(&mut tx, &row, Report::Complete, &p.lease_token, p.now).await? {
            SettleCheck::LeaseLost => return Ok(Settled::LeaseLost),
            SettleCheck::AlreadySettled => {
                return Ok(Settled::AlreadySettled(Completed {
                    queue: row.queue,
                    leased_at: None,
                }));
            }
            SettleCheck::Proceed => {}
        }
        sqlx::query(
            "UPDATE tasks SET state = 'succeeded', result = ?, finished_at = ?, \
             lease_expires_at = NULL, updated_at = ? WHERE seq = ?",
        )
        .bind(&p.result)
        .bind(now)
        .bind(now)
        .bind(row.seq)
        .execute(&mut *tx)
        .await?;
        let outcome = AttemptOutcome::Succeeded;
        let leased_at =
            Self::finish_attempt(&mut tx, &row.id, row.attempt, outcome, None, now).await?;
        tx.commit().await?;
        Ok(Settled::Applied(Completed {
            queue: row.queue,
            leased_at,
        }))
    }

    async fn task_fail(&self, p: &FailParams) -> StoreResult<Settled<FailResult>> {
        let now = ms(p.now);
        let mut tx = self.writer.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, &p.task_id).await? else {
            return Ok(Settled::NotFound);
        };
        match Self::check(&mut tx, &row, Report::Fail, &p.lease_token, p.now).await? {
            SettleCheck::LeaseLost => return Ok(Settled::LeaseLost),
            SettleCheck::AlreadySettled => {
                let state = TaskState::of(row.stored_state()?, from_ms(row.run_at), p.now);
                let next_run_at = (row.state == "pending").then(|| from_ms(row.run_at));
                return Ok(Settled::AlreadySettled(FailResult {
                    queue: row.queue,
                    state,
                    next_run_at,
                    leased_at: None,
                }));
            }
            SettleCheck::Proceed => {}
        }
        let decision = decide(&row, p.non_retryable, p.retry_after, p.now, p.jitter_unit);
        let write = FailureWrite::new(&row, decision, now);
        let outcome = AttemptOutcome::Failed;
        let leased_at = Self::write_failure(&mut tx, &row, &write, &p.error, outcome, now).await?;
        tx.commit().await?;
        Ok(Settled::Applied(FailResult {
            queue: row.queue,
            state: TaskState::of(write.state, from_ms(write.run_at), p.now),
            next_run_at: decision.run_at(),
            leased_at,
        }))
    }

    async fn lease_reclaim_expired(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Reaped> {
        let now_dt = now;
        let now = ms(now);
        let mut reaped = Reaped::default();
        let mut tx = self.writer.begin().await?;
        let past_deadline = sqlx::query_as::<_, TaskRow>(
            "SELECT * FROM tasks WHERE deadline IS NOT NULL AND deadline <= ? \
             AND state IN ('pending', 'leased') LIMIT ?",
        )
        .bind(now)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        for row in &past_deadline {
            let write = FailureWrite {
                state: StoredState::Dead,
                run_at: row.run_at,
                finished_at: Some(now),
            };
            let error = "DEADLINE_EXCEEDED";
            if row.state == "leased" {
                let outcome = AttemptOutcome::DeadlineExceeded;
                Self::write_failure(&mut tx, row, &write, error, outcome, now).await?;
            } else {
                sqlx::query(
                    "UPDATE tasks SET state = 'dead', finished_at = ?, last_error = ?, \
                     updated_at = ? WHERE seq = ?",
                )
                .bind(now)
                .bind(error)
                .bind(now)
                .bind(row.seq)
                .execute(&mut *tx)
                .await?;
            }
            reaped.deadline_exceeded += 1;
            reaped.by_queue.entry(row.queue.clone()).or_default().dead += 1;
        }
        let expired = sqlx::query_as::<_, TaskRow>(
            "SELECT * FROM tasks WHERE state = 'leased' AND lease_expires_at <= ? LIMIT ?",
        )
        .bind(now)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        for row in &expired {
            let decision = decide(row, false, None, now_dt, rand::random());
            let write = FailureWrite::new(row, decision, now);
            let outcome = AttemptOutcome::LeaseExpired;
            Self::write_failure(&mut tx, row, &write, "lease expired", outcome, now).await?;
            if write.state == StoredState::Pending && !reaped.queues.contains(&row.queue) {
                reaped.queues.push(row.queue.clone());
            }
            reaped.reclaimed += 1;
            let q = reaped.by_queue.entry(row.queue.clone()).or_default();
            q.reclaimed += 1;
            q.dead += u64::from(write.state == StoredState::Dead);
        }
        tx.commit().await?;
        Ok(reaped)
    }

    async fn task_get(&self, task_id: &str) -> StoreResult<Option<TaskRecord>> {
        sqlx::query_as::<_, TaskRow>("SELECT * FROM tasks WHERE id = ?")
            .bind(task_id)
            .fetch_optional(&self.reader)
            .await?
            .map(TaskRow::into_record)
            .transpose()
    }

    async fn task_list(&self, f: &TaskFilter) -> StoreResult<Vec<TaskRecord>> {
        let mut qb = sqlx::QueryBuilder::<Sqlite>::new("SELECT * FROM tasks WHERE 1 = 1");
        if let Some(queue) = &f.queue {
            qb.push(" AND queue = ").push_bind(queue);
        }
        if let Some(key) = &f.key {
            qb.push(" AND key = ").push_bind(key);
        }
        if let Some(worker) = &f.worker_id {
            qb.push(" AND leased_by = ").push_bind(worker);
        }
        if let Some(after) = f.created_after {
            qb.push(" AND created_at >= ").push_bind(ms(after));
        }
        if let Some(before) = f.created_before {
            qb.push(" AND created_at < ").push_bind(ms(before));
        }
        if let Some(seq) = f.before_seq {
            qb.push(" AND seq < ").push_bind(seq);
        }
        if let Some(sql) = state_filter_sql(&f.states, &ms(f.now).to_string()) {
            qb.push(" AND ").push(sql);
        }
        qb.push(" ORDER BY seq DESC LIMIT ").push_bind(f.limit);
        qb.build_query_as::<TaskRow>()
            .fetch_all(&self.reader)
            .await?
            .into_iter()
            .map(TaskRow::into_record)
            .collect()
    }

    async fn task_cancel(&self, task_id: &str, now: DateTime<Utc>) -> StoreResult<Changed> {
        let now = ms(now);
        let mut tx = self.writer.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, task_id).await? else {
            return Ok(Changed::NotFound);
        };
        let sql = match row.stored_state()? {
            StoredState::Pending => {
                "UPDATE tasks SET state = 'cancelled', finished_at = ?1, updated_at = ?1 \
                 WHERE seq = ?2"
            }
            StoredState::Leased => {
                "UPDATE tasks SET cancel_requested = 1, updated_at = ?1 WHERE seq = ?2"
            }
            StoredState::Cancelled => return Ok(Changed::Done(Box::new(row.into_record()?))),
            other => return Ok(Changed::WrongState(other)),
        };
        sqlx::query(sql)
            .bind(now)
            .bind(row.seq)
            .execute(&mut *tx)
            .await?;
        let changed = Self::changed(&mut tx, task_id).await?;
        tx.commit().await?;
        Ok(changed)
    }

    async fn task_update(
        &self,
        task_id: &str,
        u: &TaskUpdate,
        now: DateTime<Utc>,
    ) -> StoreResult<Changed> {
        let mut tx = self.writer.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, task_id).await? else {
            return Ok(Changed::NotFound);
        };
        let state = row.stored_state()?;
        if matches!(state, StoredState::Leased | StoredState::Succeeded) {
            return Ok(Changed::WrongState(state));
        }
        let max_attempts = u.max_attempts.map(i64::from).unwrap_or(row.max_attempts);
        sqlx::query(
            "UPDATE tasks SET run_at = ?, priority = ?, deadline = ?, max_attempts = ?, \
             attempts_allowed = ?, updated_at = ? WHERE seq = ?",
        )
        .bind(u.run_at.map(ms).unwrap_or(row.run_at))
        .bind(u.priority.map(i64::from).unwrap_or(row.priority))
        .bind(u.deadline.map(|d| d.map(ms)).unwrap_or(row.deadline))
        .bind(max_attempts)
        .bind(row.attempts_allowed - row.max_attempts + max_attempts)
        .bind(ms(now))
        .bind(row.seq)
        .execute(&mut *tx)
        .await?;
        let changed = Self::changed(&mut tx, task_id).await?;
        tx.commit().await?;
        Ok(changed)
    }

    async fn task_requeue(&self, task_id: &str, now: DateTime<Utc>) -> StoreResult<Changed> {
        let mut tx = self.writer.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, task_id).await? else {
            return Ok(Changed::NotFound);
        };
        let state = row.stored_state()?;
        if !matches!(state, StoredState::Dead | StoredState::Cancelled) {
            return Ok(Changed::WrongState(state));
        }
        sqlx::query(
            "UPDATE tasks SET state = 'pending', run_at = ?1, attempts_allowed = attempt + max_attempts, \
             cancel_requested = 0, finished_at = NULL, updated_at = ?1 WHERE seq = ?2",
        )
        .bind(ms(now))
        .bind(row.seq)
        .execute(&mut *tx)
        .await?;
        let changed = Self::changed(&mut tx, task_id).await?;
        tx.commit().await?;
        Ok(changed)
    }

    async fn attempt_list(&self, task_id: &str) -> StoreResult<Option<Vec<AttemptRecord>>> {
        let exists: Option<i64> = sqlx::query_scalar("SELECT seq FROM tasks WHERE id = ?")
            .bind(task_id)
            .fetch_optional(&self.reader)
            .await?;
        if exists.is_none() {
            return Ok(None);
        }
        let rows = sqlx::query_as::<_, AttemptRow>(
            "SELECT attempt, worker_id, worker_address, leased_at, finished_at, outcome, error, \
             fencing_token FROM task_attempts WHERE task_id = ? ORDER BY attempt",
        )
        .bind(task_id)
        .fetch_all(&self.reader)
        .await?;
        rows.into_iter()
            .map(AttemptRow::into_record)
            .collect::<StoreResult<Vec<_>>>()
            .map(Some)
    }

    async fn queue_stats(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<QueueStatsRecord>> {
        let now = ms(now);
        let mut qb = sqlx::QueryBuilder::<Sqlite>::new("SELECT queue, state, run_at > ");
        qb.push_bind(now)
            .push(" AS later, COUNT(*), MIN(run_at) FROM tasks");
        if !queues.is_empty() {
            qb.push(" WHERE queue IN (");
            let mut sep = qb.separated(", ");
            for q in queues {
                sep.push_bind(q);
            }
            qb.push(")");
        }
        qb.push(" GROUP BY queue, state, later");
        let counts: Vec<(String, String, bool, i64, i64)> =
            qb.build_query_as().fetch_all(&self.reader).await?;
        let mut qb = sqlx::QueryBuilder::<Sqlite>::new(
            "SELECT t.queue, a.outcome, COUNT(*) FROM task_attempts a \
             JOIN tasks t ON t.id = a.task_id WHERE a.finished_at >= ",
        );
        qb.push_bind(now - 60_000);
        if !queues.is_empty() {
            qb.push(" AND t.queue IN (");
            let mut sep = qb.separated(", ");
            for q in queues {
                sep.push_bind(q);
            }
            qb.push(")");
        }
        qb.push(" GROUP BY t.queue, a.outcome");
        let recent: Vec<(String, String, i64)> =
            qb.build_query_as().fetch_all(&self.reader).await?;
        Ok(super::row::fold_stats(counts, recent))
    }

    async fn task_purge_finished(
        &self,
        before: DateTime<Utc>,
        scope: &PurgeScope,
        limit: u32,
    ) -> StoreResult<u64> {
        let mut qb = sqlx::QueryBuilder::<Sqlite>::new(
            "DELETE FROM tasks WHERE seq IN (SELECT seq FROM tasks \
             WHERE state IN ('succeeded', 'dead', 'cancelled') AND finished_at < ",
        );
        qb.push_bind(ms(before));
        match scope {
            PurgeScope::Only(q) => {
                qb.push(" AND queue = ").push_bind(q);
            }
            PurgeScope::AllExcept(qs) if !qs.is_empty() => {
                qb.push(" AND queue NOT IN (");
                let mut sep = qb.separated(", ");
                for q in qs {
                    sep.push_bind(q);
                }
                qb.push(")");
            }
            PurgeScope::AllExcept(_) => {}
        }
        qb.push(" LIMIT ").push_bind(limit).push(") RETURNING id");
        let mut tx = self.writer.begin().await?;
        let ids: Vec<String> = qb.build_query_scalar().fetch_all(&mut *tx).await?;
        for id in &ids {
            sqlx::query("DELETE FROM task_attempts WHERE task_id = ?")
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(ids.len() as u64)
    }

    fn pool_stats(&self) -> PoolStats {
        PoolStats {
            size: self.writer.size() + self.reader.size(),
            idle: self.writer.num_idle() + self.reader.num_idle(),
        }
    }

    async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }
}
