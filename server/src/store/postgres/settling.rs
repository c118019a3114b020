//! Settling on Postgres: checkpoints, completions (one statement for the live
//! leases of a batch, then the checked path for the rest: lock, check the
//! lease, settle), failures, and the reclaim of expired leases and tasks past
//! their deadlines; the row-locking steps they share: check, finish the
//! attempt, write the failure.

use super::super::settling::{already_failed, check_row, finish_attempt_on, refused};
use super::*;

impl PostgresStore {
    pub(super) async fn check(
        tx: &mut Transaction<'_, Postgres>,
        row: &TaskRow,
        report: Report,
        token: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<SettleCheck> {
        let state = row.stored_state()?;
        let outcome = if state == StoredState::Leased {
            None
        } else if state == StoredState::Succeeded {
            // Its last attempt succeeded; the task row carries it (migration 0018).
            Some(AttemptOutcome::Succeeded)
        } else {
            let outcome: Option<String> = sqlx::query_scalar(sql::SETTLE_LATEST_OUTCOME)
                .bind(&row.id)
                .bind(row.attempt)
                .fetch_optional(&mut **tx)
                .await?;
            outcome.as_deref().and_then(AttemptOutcome::parse)
        };
        check_row(row, outcome, report, token, now)
    }

    /// Writes the attempt row of an attempt that ends now; returns when it was leased.
    pub(super) async fn finish_attempt(
        tx: &mut Transaction<'_, Postgres>,
        a: &AttemptEnd<'_>,
        outcome: AttemptOutcome,
        error: Option<&str>,
        now: i64,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        finish_attempt_on::<Postgres>(tx, sql::SETTLE_ATTEMPT_END, a, outcome, error, now).await
    }

    pub(super) async fn write_failure(
        tx: &mut Transaction<'_, Postgres>,
        row: &TaskRow,
        write: &FailureWrite,
        error: &str,
        outcome: AttemptOutcome,
        now: i64,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        sqlx::query(sql::SETTLE_FAILURE)
            .bind(write.state.as_str())
            .bind(write.run_at)
            .bind(write.finished_at)
            .bind(error)
            .bind(now)
            .bind(&row.id)
            .execute(&mut **tx)
            .await?;
        // Flow: the failure and what follows it.
        let evs = flow_failure_events(row, write.state.as_str(), write.run_at, error, now);
        events::record(tx, &evs).await?;
        let leased_at =
            Self::finish_attempt(tx, &row.attempt_end(), outcome, Some(error), now).await?;
        if write.state == StoredState::Pending {
            Self::notify(tx, &[&row.queue]).await?;
        }
        Ok(leased_at)
    }

    /// Answers the completions that the one-statement path did not settle, in one
    /// read: unknown task, a repeated Complete of a settled lease, or a lost lease.
    /// A lease that is live by now (it cannot be, short of a clock step between the
    /// two statements) is settled on its own.
    pub(super) async fn complete_checked_many(
        &self,
        ps: &[&CompleteParams],
    ) -> StoreResult<Vec<Settled<Completed>>> {
        let ids: Vec<&str> = ps.iter().map(|p| p.task_id.as_str()).collect();
        /// id, queue, state, lease token, lease expiry, outcome of the latest attempt.
        type Checked = (
            String,
            String,
            String,
            Option<String>,
            Option<i64>,
            Option<String>,
        );
        let rows: Vec<Checked> = sqlx::query_as(sql::TASK_COMPLETE_MANY_CHECKED)
            .bind(&ids)
            .fetch_all(&self.pool)
            .await?;
        let rows: std::collections::HashMap<&str, _> =
            rows.iter().map(|r| (r.0.as_str(), r)).collect();
        let mut out = Vec::with_capacity(ps.len());
        for p in ps {
            let Some((_, queue, state, token, expires, outcome)) =
                rows.get(p.task_id.as_str()).copied()
            else {
                out.push(Settled::NotFound);
                continue;
            };
            let state = StoredState::parse(state).ok_or_else(|| {
                StoreError::Corrupt(format!("task {} state {state:?}", p.task_id))
            })?;
            let check = settle_check(
                state,
                token.as_deref(),
                expires.map(from_ms),
                outcome.as_deref().and_then(AttemptOutcome::parse),
                Report::Complete,
                &p.lease_token,
                p.now,
            );
            let repeated = || Ok(Completed::repeated(queue.clone()));
            out.push(match refused(check, repeated)? {
                Some(answer) => answer,
                None => self.complete_checked(p).await?,
            });
        }
        Ok(out)
    }

    /// Completes one task under a row lock: finds out why the one-statement path
    /// did not settle it (unknown task, repeated Complete, lost lease) and settles
    /// it if it may.
    pub(super) async fn complete_checked(
        &self,
        p: &CompleteParams,
    ) -> StoreResult<Settled<Completed>> {
        let now = ms(p.now);
        let mut tx = self.pool.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, &p.task_id).await? else {
            tx.rollback().await?;
            return Ok(Settled::NotFound);
        };
        let checked = Self::check(&mut tx, &row, Report::Complete, &p.lease_token, p.now).await?;
        if let Some(answer) = refused(checked, || Ok(Completed::repeated(row.queue.clone())))? {
            tx.rollback().await?;
            return Ok(answer);
        }
        sqlx::query(sql::TASK_COMPLETE_WRITE)
            .bind(&p.result)
            .bind(now)
            .bind(&row.id)
            .execute(&mut *tx)
            .await?;
        let ev = super::super::flow::succeeded(&row, now);
        events::record(&mut tx, &[ev]).await?;
        // The succeeded attempt stays on the task row (migration 0018).
        let leased_at = Some(from_ms(row.attempt_end().leased_at));
        tx.commit().await?;
        Ok(Settled::Applied(Completed {
            queue: row.queue,
            leased_at,
        }))
    }
}

#[async_trait]
impl Settling for PostgresStore {
    async fn task_checkpoint(&self, p: &CheckpointParams) -> StoreResult<Settled<LeaseState>> {
        let now = ms(p.now);
        let mut tx = self.pool.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, &p.task_id).await? else {
            tx.rollback().await?;
            return Ok(Settled::NotFound);
        };
        let live = row.lease_is_live(&p.lease_token, p.now)?;
        if !live {
            tx.rollback().await?;
            return Ok(Settled::LeaseLost);
        }
        let (at, cancel_requested): (i64, bool) = sqlx::query_as(sql::TASK_CHECKPOINT)
            .bind(&p.checkpoint)
            .bind(p.extend_by.map(duration_ms))
            .bind(now)
            .bind(&row.id)
            .fetch_one(&mut *tx)
            .await?;
        events::record(&mut tx, &[flow_of_row(&row, EventKind::Checkpointed, now)]).await?;
        tx.commit().await?;
        Ok(Settled::Applied(LeaseState::Live {
            lease_expires_at: from_ms(at),
            cancel_requested,
        }))
    }

    async fn task_complete(&self, p: &CompleteParams) -> StoreResult<Settled<Completed>> {
        let mut settled = self.task_complete_many(std::slice::from_ref(p)).await?;
        settled
            .pop()
            .ok_or_else(|| StoreError::Corrupt("no completion outcome".into()))
    }

    async fn task_complete_many(
        &self,
        ps: &[CompleteParams],
    ) -> StoreResult<Vec<Settled<Completed>>> {
        if ps.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<&str> = ps.iter().map(|p| p.task_id.as_str()).collect();
        let tokens: Vec<&str> = ps.iter().map(|p| p.lease_token.as_str()).collect();
        let results: Vec<&[u8]> = ps.iter().map(|p| p.result.as_slice()).collect();
        // Each item keeps its own clock: combined calls come from different callers.
        let nows: Vec<i64> = ps.iter().map(|p| ms(p.now)).collect();
        // Live leases settle in one statement, with their attempts. The lease check
        // is a CASE so the planner cannot use it for an index: rows are always
        // found by id (on young statistics it would otherwise scan every lease).
        // `id = ANY($1)` hands the planner the ids themselves, so it probes the
        // id index: joined to `input` alone it hashed the whole table, finished
        // tasks included, for every batch (docs/performance.md, "Settle"). The
        // answer reads `t` alone: joined to the attempts' RETURNING, a generic plan
        // (which expects one row from each) looped over one for every row of the other.
        // Each settled row answers with the token that settled it, so a stale
        // token naming the same task in the same batch is never taken for it.
        let done: Vec<(String, String, String, i64)> = sqlx::query_as(sql::TASK_COMPLETE_MANY)
            .bind(&ids)
            .bind(&tokens)
            .bind(&results)
            .bind(&nows)
            .fetch_all(self.hot())
            .await?;
        let mut done: std::collections::HashMap<(String, String), (String, i64)> = done
            .into_iter()
            .map(|(id, token, queue, leased_at)| ((id, token), (queue, leased_at)))
            .collect();
        let mut out: Vec<Option<Settled<Completed>>> = ps
            .iter()
            .map(|p| {
                done.remove(&(p.task_id.clone(), p.lease_token.clone()))
                    .map(|(queue, leased_at)| {
                        Settled::Applied(Completed {
                            queue,
                            leased_at: Some(from_ms(leased_at)),
                        })
                    })
            })
            .collect();
        // The rest (unknown, repeated, lost, or named twice) are answered by one
        // read: none of them can settle now, since the statement above settled
        // every live lease it was given.
        let rest: Vec<usize> = (0..ps.len()).filter(|&i| out[i].is_none()).collect();
        if !rest.is_empty() {
            let checked = self
                .complete_checked_many(&rest.iter().map(|&i| &ps[i]).collect::<Vec<_>>())
                .await?;
            for (i, settled) in rest.into_iter().zip(checked) {
                out[i] = Some(settled);
            }
        }
        out.into_iter()
            .map(|s| s.ok_or_else(|| StoreError::Corrupt("no completion outcome".into())))
            .collect()
    }

    async fn task_fail(&self, p: &FailParams) -> StoreResult<Settled<FailResult>> {
        let now = ms(p.now);
        let mut tx = self.pool.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, &p.task_id).await? else {
            tx.rollback().await?;
            return Ok(Settled::NotFound);
        };
        let checked = Self::check(&mut tx, &row, Report::Fail, &p.lease_token, p.now).await?;
        if let Some(answer) = refused(checked, || already_failed(&row, p.now))? {
            tx.rollback().await?;
            return Ok(answer);
        }
        let decision = decide(&row, p.non_retryable, p.retry_after, p.now, p.jitter_unit);
        let write = FailureWrite::new(&row, decision, now);
        let outcome = AttemptOutcome::Failed;
        let leased_at = Self::write_failure(&mut tx, &row, &write, &p.error, outcome, now).await?;
        if write.state == StoredState::Pending {
            // Routing: a sticky retry is kept for this worker.
            routing::reserve_retry(&mut tx, &row, p).await?;
        }
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
        let mut tx = self.pool.begin().await?;
        let past_deadline = sqlx::query_as::<_, TaskRow>(sql::LEASE_RECLAIM_EXPIRED_PAST_DEADLINE)
            .bind(now)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await?;
        for row in &past_deadline {
            let write = FailureWrite::dead(row, now);
            let error = "DEADLINE_EXCEEDED";
            if row.state == "leased" {
                let outcome = AttemptOutcome::DeadlineExceeded;
                Self::write_failure(&mut tx, row, &write, error, outcome, now).await?;
            } else {
                sqlx::query(sql::LEASE_RECLAIM_EXPIRED_DEAD)
                    .bind(now)
                    .bind(error)
                    .bind(&row.id)
                    .execute(&mut *tx)
                    .await?;
                let evs = flow_failure_events(row, "dead", row.run_at, error, now);
                events::record(&mut tx, &evs).await?;
            }
            reaped.count_deadline(&row.queue);
        }
        let expired = sqlx::query_as::<_, TaskRow>(sql::LEASE_RECLAIM_EXPIRED_LEASES)
            .bind(now)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await?;
        for row in &expired {
            let decision = decide(row, false, None, now_dt, rand::random());
            let write = FailureWrite::new(row, decision, now);
            let outcome = AttemptOutcome::LeaseExpired;
            let error = super::super::row::expiry_error(row);
            Self::write_failure(&mut tx, row, &write, error, outcome, now).await?;
            reaped.count_reclaimed(&row.queue, write.state);
        }
        tx.commit().await?;
        Ok(reaped)
    }
}
