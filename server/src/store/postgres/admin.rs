//! Admin changes and maintenance: reclaiming expired leases, cancel, update,
//! requeue, purging finished tasks.

use super::*;

impl PostgresStore {
    pub(super) async fn lease_reclaim_expired(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Reaped> {
        let now_dt = now;
        let now = ms(now);
        let mut reaped = Reaped::default();
        let mut tx = self.pool.begin().await?;
        let past_deadline = sqlx::query_as::<_, TaskRow>(
            "WITH live AS (SELECT * FROM tasks WHERE deadline IS NOT NULL AND deadline <= $1 \
               AND state IN ('pending', 'leased') LIMIT $2 FOR UPDATE SKIP LOCKED), \
             blocked AS (SELECT * FROM tasks WHERE deadline IS NOT NULL AND deadline <= $1 \
               AND state = 'blocked' LIMIT $2 FOR UPDATE SKIP LOCKED) \
             SELECT * FROM live UNION ALL SELECT * FROM blocked",
        )
        .bind(now)
        .bind(i64::from(limit))
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
                    "UPDATE tasks SET state = 'dead', finished_at = $1, last_error = $2, \
                     updated_at = $1 WHERE id = $3",
                )
                .bind(now)
                .bind(error)
                .bind(&row.id)
                .execute(&mut *tx)
                .await?;
                let evs = flow_failure_events(row, "dead", row.run_at, error, now);
                events::record(&mut tx, &evs).await?;
            }
            reaped.deadline_exceeded += 1;
            reaped.by_queue.entry(row.queue.clone()).or_default().dead += 1;
        }
        let expired = sqlx::query_as::<_, TaskRow>(
            "SELECT * FROM tasks WHERE state = 'leased' AND lease_expires_at <= $1 \
             LIMIT $2 FOR UPDATE SKIP LOCKED",
        )
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

    pub(super) async fn task_cancel(
        &self,
        task_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Changed> {
        let now = ms(now);
        let mut tx = self.pool.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, task_id).await? else {
            tx.rollback().await?;
            return Ok(Changed::NotFound);
        };
        let (sql, kind) = match row.stored_state()? {
            StoredState::Pending | StoredState::Blocked => (
                "UPDATE tasks SET state = 'cancelled', finished_at = $1, updated_at = $1 \
                 WHERE id = $2",
                EventKind::Cancelled,
            ),
            StoredState::Leased => (
                "UPDATE tasks SET cancel_requested = TRUE, updated_at = $1 WHERE id = $2",
                EventKind::Updated,
            ),
            StoredState::Cancelled => {
                tx.rollback().await?;
                return Ok(Changed::Done(Box::new(row.into_record()?)));
            }
            other => {
                tx.rollback().await?;
                return Ok(Changed::WrongState(other));
            }
        };
        sqlx::query(sql)
            .bind(now)
            .bind(&row.id)
            .execute(&mut *tx)
            .await?;
        let changed = Self::changed_event(&mut tx, task_id, kind, now).await?;
        tx.commit().await?;
        Ok(changed)
    }

    pub(super) async fn task_update(
        &self,
        task_id: &str,
        u: &TaskUpdate,
        now: DateTime<Utc>,
    ) -> StoreResult<Changed> {
        let mut tx = self.pool.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, task_id).await? else {
            tx.rollback().await?;
            return Ok(Changed::NotFound);
        };
        let state = row.stored_state()?;
        if matches!(state, StoredState::Leased | StoredState::Succeeded) {
            tx.rollback().await?;
            return Ok(Changed::WrongState(state));
        }
        let max_attempts = u.max_attempts.map(i64::from).unwrap_or(row.max_attempts);
        sqlx::query(
            "UPDATE tasks SET run_at = $1, waiting = $1 > $6, priority = $2, deadline = $3, \
             max_attempts = $4, attempts_allowed = $5, updated_at = $6 WHERE id = $7",
        )
        .bind(u.run_at.map(ms).unwrap_or(row.run_at))
        .bind(u.priority.map(i64::from).unwrap_or(row.priority))
        .bind(u.deadline.map(|d| d.map(ms)).unwrap_or(row.deadline))
        .bind(max_attempts)
        .bind(row.attempts_allowed - row.max_attempts + max_attempts)
        .bind(ms(now))
        .bind(&row.id)
        .execute(&mut *tx)
        .await?;
        if state == StoredState::Pending {
            Self::notify(&mut tx, &[&row.queue]).await?;
        }
        // Routing: an admin change frees a reserved retry.
        routing::clear_reservation(&mut tx, &row).await?;
        let changed = Self::changed_event(&mut tx, task_id, EventKind::Updated, ms(now)).await?;
        tx.commit().await?;
        Ok(changed)
    }

    pub(super) async fn task_requeue(
        &self,
        task_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Changed> {
        let mut tx = self.pool.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, task_id).await? else {
            tx.rollback().await?;
            return Ok(Changed::NotFound);
        };
        let state = row.stored_state()?;
        if !matches!(state, StoredState::Dead | StoredState::Cancelled) {
            tx.rollback().await?;
            return Ok(Changed::WrongState(state));
        }
        sqlx::query(
            "UPDATE tasks SET state = 'pending', run_at = $1, waiting = FALSE, attempts_allowed = attempt + max_attempts, \
             cancel_requested = FALSE, finished_at = NULL, updated_at = $1 WHERE id = $2",
        )
        .bind(ms(now))
        .bind(&row.id)
        .execute(&mut *tx)
        .await?;
        Self::notify(&mut tx, &[&row.queue]).await?;
        // Routing: an admin requeue frees a reserved retry.
        routing::clear_reservation(&mut tx, &row).await?;
        let changed = Self::changed_event(&mut tx, task_id, EventKind::Requeued, ms(now)).await?;
        tx.commit().await?;
        Ok(changed)
    }

    pub(super) async fn task_purge_finished(
        &self,
        before: DateTime<Utc>,
        scope: &PurgeScope,
        limit: u32,
    ) -> StoreResult<u64> {
        let (only, except): (Option<&str>, Vec<&str>) = match scope {
            PurgeScope::Only(q) => (Some(q), Vec::new()),
            PurgeScope::AllExcept(qs) => (None, qs.iter().map(String::as_str).collect()),
        };
        // Old finished tasks are found through tasks_queue_state (queue, state,
        // finished_at), the only index a settle writes besides the universal ones
        // (0013): its queues are walked one index probe each (qs), then each
        // (queue, finished state) is a range of it.
        let purged: i64 = sqlx::query_scalar(
            "WITH RECURSIVE qs(q) AS ( \
               SELECT CASE WHEN $2::text IS NULL THEN (SELECT queue FROM tasks \
                 WHERE state NOT IN ('pending', 'leased') ORDER BY queue LIMIT 1) ELSE $2 END \
               UNION ALL \
               SELECT (SELECT t.queue FROM tasks t WHERE t.state NOT IN ('pending', 'leased') \
                 AND t.queue > qs.q ORDER BY t.queue LIMIT 1) \
               FROM qs WHERE qs.q IS NOT NULL AND $2::text IS NULL), \
             old AS ( \
               SELECT o.id FROM qs \
               CROSS JOIN unnest(ARRAY['succeeded', 'dead', 'cancelled']) AS s(state) \
               CROSS JOIN LATERAL (SELECT t.id FROM tasks t WHERE t.queue = qs.q \
                 AND t.state = s.state AND t.state NOT IN ('pending', 'leased') \
                 AND t.finished_at < $1 LIMIT $4) o \
               WHERE qs.q IS NOT NULL AND NOT (qs.q = ANY($3)) LIMIT $4), \
             gone AS ( \
               DELETE FROM tasks WHERE id IN ( \
                 SELECT id FROM tasks WHERE id IN (SELECT id FROM old) \
                   AND state IN ('succeeded', 'dead', 'cancelled') AND finished_at < $1 \
                 FOR UPDATE SKIP LOCKED) \
               RETURNING id), \
             attempts AS (DELETE FROM task_attempts WHERE task_id IN (SELECT id FROM gone)), \
             edges AS (DELETE FROM task_deps WHERE task_id IN (SELECT id FROM gone)), \
             keys AS (DELETE FROM task_key_deps WHERE task_id IN (SELECT id FROM gone)) \
             SELECT COUNT(*) FROM gone",
        )
        .bind(ms(before))
        .bind(only)
        .bind(&except)
        .bind(i64::from(limit))
        .fetch_one(&self.pool)
        .await?;
        Ok(purged.max(0) as u64)
    }

    /// REPLACE_WAITING (see `Store::task_replace_waiting`): the row is locked
    /// (FOR UPDATE rechecks its state once a lease that held it commits), so a
    /// task a lease took is never changed.
    pub(super) async fn task_replace_waiting(
        &self,
        r: &Replacement,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<String>> {
        let mut tx = self.pool.begin().await?;
        let held: Option<(String, String, String)> = sqlx::query_as(
            "SELECT id, state, metadata FROM tasks WHERE queue = $1 AND key = $2 \
             AND state IN ('pending', 'blocked') FOR UPDATE",
        )
        .bind(&r.queue)
        .bind(&r.key)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((id, state, metadata)) = held else {
            tx.rollback().await?;
            return Ok(None);
        };
        let now = ms(now);
        // Every write of run_at writes `waiting` (migration 0017).
        sqlx::query(
            "UPDATE tasks SET payload = $1, run_at = $2, waiting = $2 > $5, priority = $3, \
             metadata = $4, updated_at = $5 WHERE id = $6",
        )
        .bind(&r.payload)
        .bind(ms(r.run_at))
        .bind(i64::from(r.priority))
        .bind(super::super::merged_metadata(&metadata, &r.metadata))
        .bind(now)
        .bind(&id)
        .execute(&mut *tx)
        .await?;
        if state == "pending" {
            Self::notify(&mut tx, &[&r.queue]).await?;
        }
        Self::changed_event(&mut tx, &id, EventKind::Replaced, now).await?;
        tx.commit().await?;
        Ok(Some(id))
    }
}
