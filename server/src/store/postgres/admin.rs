//! Admin changes and maintenance: reclaiming expired leases, cancel, update,
//! requeue, purging finished tasks.

use std::collections::HashSet;

use super::super::row::{IntoRecord, records};
use super::*;

#[async_trait]
impl Admin for PostgresStore {
    async fn task_cancel(&self, task_id: &str, now: DateTime<Utc>) -> StoreResult<Changed> {
        let now = ms(now);
        let mut tx = self.pool.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, task_id).await? else {
            tx.rollback().await?;
            return Ok(Changed::NotFound);
        };
        let (stmt, kind) = match row.stored_state()? {
            StoredState::Pending | StoredState::Blocked => {
                (sql::TASK_CANCEL_PENDING, EventKind::Cancelled)
            }
            StoredState::Leased => (sql::TASK_CANCEL_LEASED, EventKind::Updated),
            StoredState::Cancelled => {
                tx.rollback().await?;
                return Ok(Changed::Done(Box::new(row.into_record()?)));
            }
            other => {
                tx.rollback().await?;
                return Ok(Changed::WrongState(other));
            }
        };
        sqlx::query(stmt)
            .bind(now)
            .bind(&row.id)
            .execute(&mut *tx)
            .await?;
        let changed = Self::changed_event(&mut tx, task_id, kind, now, None).await?;
        tx.commit().await?;
        Ok(changed)
    }

    async fn task_requeue(&self, task_id: &str, now: DateTime<Utc>) -> StoreResult<Changed> {
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
        sqlx::query(sql::TASK_REQUEUE)
            .bind(ms(now))
            .bind(&row.id)
            .execute(&mut *tx)
            .await?;
        Self::notify(&mut tx, &[&row.queue]).await?;
        // Routing: an admin requeue frees a reserved retry.
        routing::clear_reservation(&mut tx, &row).await?;
        let changed =
            Self::changed_event(&mut tx, task_id, EventKind::Requeued, ms(now), None).await?;
        tx.commit().await?;
        Ok(changed)
    }

    async fn task_purge_finished(
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
        let purged: i64 = sqlx::query_scalar(sql::TASK_PURGE_FINISHED)
            .bind(ms(before))
            .bind(only)
            .bind(&except)
            .bind(i64::from(limit))
            .fetch_one(&self.pool)
            .await?;
        Ok(purged.max(0) as u64)
    }

    async fn task_dead_groups(&self, p: &DeadGroupParams) -> StoreResult<Vec<DeadGroup>> {
        // Console (migration 0011): counted per (queue, error_hash) from
        // tasks_dead_error alone, then one row per group read for its text.
        let rows: Vec<(String, String, i64, Option<i64>)> = sqlx::query_as(sql::TASK_DEAD_GROUPS)
            .bind(p.queue.as_deref())
            .bind(p.error.as_deref())
            .bind(i64::from(p.limit))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(super::super::observe::dead_group_row)
            .collect())
    }

    async fn task_requeue_dead(&self, p: &RequeueDeadParams) -> StoreResult<u64> {
        let mut tx = self.pool.begin().await?;
        let n: Option<i32> = sqlx::query_scalar(sql::TASK_REQUEUE_DEAD)
            .bind(ms(p.now))
            .bind(&p.queue)
            .bind(&p.error)
            .bind(i64::from(p.limit))
            .fetch_optional(&mut *tx)
            .await?;
        let n = events::changed(n);
        if n > 0 {
            Self::notify(&mut tx, &[&p.queue]).await?;
        }
        tx.commit().await?;
        Ok(n)
    }

    async fn task_cancel_dead(&self, p: &CancelDeadParams) -> StoreResult<u64> {
        let q = match (&p.error, &p.task_id) {
            (None, None) => sqlx::query_scalar(sql::TASK_CANCEL_DEAD).bind(&p.queue),
            (Some(e), None) => sqlx::query_scalar(sql::TASK_CANCEL_DEAD_ERROR)
                .bind(&p.queue)
                .bind(e)
                .bind(e),
            (None, Some(id)) => sqlx::query_scalar(sql::TASK_CANCEL_DEAD_ID)
                .bind(&p.queue)
                .bind(id),
            (Some(e), Some(id)) => sqlx::query_scalar(sql::TASK_CANCEL_DEAD_ERROR_ID)
                .bind(&p.queue)
                .bind(e)
                .bind(e)
                .bind(id),
        };
        let n: Option<i32> = q
            .bind(i64::from(p.limit))
            .bind(ms(p.now))
            .fetch_optional(&self.pool)
            .await?;
        Ok(super::events::changed(n))
    }

    async fn task_select(&self, f: &BulkFilter) -> StoreResult<Vec<TaskRecord>> {
        // Dynamic: the filters are optional.
        let push_where = |qb: &mut sqlx::QueryBuilder<Postgres>| {
            qb.push(" AND queue = ").push_bind(&f.queue);
            filter::push_select_terms(qb, &filter::POSTGRES, f);
        };
        let limit = i64::from(f.limit);
        let mut qb = if f.created_after.is_some() || f.created_before.is_some() {
            // tasks_created leaves LEASED rows out (0013): a creation-time range reads
            // them apart, so both parts keep an index.
            let mut qb = sqlx::QueryBuilder::<Postgres>::new(sql::TASK_SELECT_RANGE_HEAD);
            push_where(&mut qb);
            qb.push(" ORDER BY seq LIMIT ")
                .push_bind(limit)
                .push(sql::TASK_SELECT_RANGE_LEASED);
            push_where(&mut qb);
            qb.push(" ORDER BY seq LIMIT ")
                .push_bind(limit)
                .push(")) u");
            qb
        } else {
            let mut qb = sqlx::QueryBuilder::<Postgres>::new(sql::TASK_SELECT_HEAD);
            push_where(&mut qb);
            qb
        };
        qb.push(" ORDER BY seq LIMIT ").push_bind(limit);
        records(qb.build_query_as::<TaskRow>().fetch_all(&self.pool).await?)
    }

    async fn task_cancel_many(
        &self,
        task_ids: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<BulkCancelled> {
        let mut tx = self.pool.begin().await?;
        // Flow: each statement records its events.
        let cancelled: Option<i32> = sqlx::query_scalar(sql::TASK_CANCEL_MANY_PENDING)
            .bind(task_ids)
            .bind(ms(now))
            .fetch_optional(&mut *tx)
            .await?;
        let cancelled = super::events::changed(cancelled);
        let requested: Option<i32> = sqlx::query_scalar(sql::TASK_CANCEL_MANY_LEASED)
            .bind(task_ids)
            .bind(ms(now))
            .fetch_optional(&mut *tx)
            .await?;
        let requested = super::events::changed(requested);
        tx.commit().await?;
        Ok(BulkCancelled {
            cancelled,
            cancel_requested: requested,
        })
    }

    async fn task_requeue_many(
        &self,
        tasks: &[(String, DateTime<Utc>)],
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let ids: Vec<&str> = tasks.iter().map(|t| t.0.as_str()).collect();
        let run_at: Vec<i64> = tasks.iter().map(|t| ms(t.1)).collect();
        let mut tx = self.pool.begin().await?;
        let queues: Vec<String> = sqlx::query_scalar(sql::TASK_REQUEUE_MANY)
            .bind(&ids)
            .bind(&run_at)
            .bind(ms(now))
            .fetch_all(&mut *tx)
            .await?;
        let distinct: HashSet<&str> = queues.iter().map(String::as_str).collect();
        let distinct: Vec<&str> = distinct.into_iter().collect();
        sqlx::query(sql::QUEUE_NOTIFY)
            .bind(CHANNEL)
            .bind(&distinct)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(queues.len() as u64)
    }
}
