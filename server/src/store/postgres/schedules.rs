//! Schedules on Postgres. A fire is one transaction: the cursor update is
//! conditional on the version read (a replica that read the same due schedule
//! waits for the row lock, then finds the version moved and writes nothing), and
//! each run row is keyed by (schedule_id, fire_time).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Postgres;

use super::super::row::{duration_ms, ms};
use super::super::row::{record, records};
use super::super::schedule_steps::{bind_definition, schedule_delete_of, schedule_due_of};
use super::super::schedules::{RunRow, RunSql, ScheduleRow, fired_summary, record_run, run_task};
use super::super::*;
use super::{PostgresStore, sql};

/// A task with nothing but what `insert_task` writes: no key, routing, copies
/// or concurrency key.
fn is_plain(t: &NewTask) -> bool {
    t.key.is_none() && t.concurrency_key.is_none() && !super::routing::is_routed(&t.routing)
}

async fn insert_task(
    tx: &mut sqlx::Transaction<'_, Postgres>,
    t: &NewTask,
    schedule_id: &str,
    fire_time: i64,
    now: i64,
) -> StoreResult<()> {
    let metadata = serde_json::to_string(&t.metadata).unwrap_or_else(|_| "{}".into());
    // Flow: the SUBMITTED event in the same statement.
    sqlx::query(sql::SCHEDULE_FIRE_TASK)
        .bind(&t.id)
        .bind(&t.queue)
        .bind(&t.key)
        .bind(&t.payload)
        .bind(i64::from(t.priority))
        .bind(ms(t.run_at))
        .bind(t.deadline.map(ms))
        .bind(i64::from(t.retry.max_attempts))
        .bind(duration_ms(t.retry.initial_backoff))
        .bind(t.retry.backoff_multiplier)
        .bind(duration_ms(t.retry.max_backoff))
        .bind(t.retry.jitter)
        .bind(metadata)
        .bind(now)
        .bind(schedule_id)
        .bind(fire_time)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

const RUN_SQL: RunSql = RunSql {
    run: sql::SCHEDULE_FIRE_RUN,
    holder: sql::SCHEDULE_FIRE_HOLDER,
    run_holder: sql::SCHEDULE_FIRE_RUN_HOLDER,
    run_task: sql::SCHEDULE_FIRE_RUN_TASK,
};

#[async_trait]
impl Schedules for PostgresStore {
    async fn schedule_insert(&self, s: &ScheduleRecord) -> StoreResult<bool> {
        let q = sqlx::query(sql::SCHEDULE_INSERT).bind(&s.id);
        let n = bind_definition(q, s)
            .bind(&s.created_by)
            .bind(ms(s.created_at))
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(n == 1)
    }

    async fn schedule_get(&self, id: &str) -> StoreResult<Option<ScheduleRecord>> {
        record(
            sqlx::query_as::<_, ScheduleRow>(sql::SCHEDULE_GET)
                .bind(id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    async fn schedule_list(&self, f: &ScheduleFilter) -> StoreResult<Vec<ScheduleRecord>> {
        // Dynamic: the filters and the page are optional.
        let mut qb = sqlx::QueryBuilder::<Postgres>::new(sql::SCHEDULE_LIST_HEAD);
        if let Some(by) = &f.created_by {
            qb.push(" AND created_by = ").push_bind(by);
        }
        if let Some(after) = &f.after_id {
            qb.push(" AND id COLLATE \"C\" > ").push_bind(after);
        }
        qb.push(" ORDER BY id COLLATE \"C\" LIMIT ")
            .push_bind(i64::from(f.limit));
        records(
            qb.build_query_as::<ScheduleRow>()
                .fetch_all(&self.pool)
                .await?,
        )
    }

    async fn schedule_update(&self, s: &ScheduleRecord, now: DateTime<Utc>) -> StoreResult<bool> {
        let q = sqlx::query(sql::SCHEDULE_UPDATE).bind(&s.id);
        let n = bind_definition(q, s)
            .bind(ms(now))
            .bind(s.version)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(n == 1)
    }

    async fn schedule_delete(&self, id: &str) -> StoreResult<bool> {
        let statements = [sql::SCHEDULE_DELETE_RUNS, sql::SCHEDULE_DELETE];
        schedule_delete_of(&self.pool, statements, id).await
    }

    async fn schedule_due(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Vec<DueSchedule>> {
        schedule_due_of(&self.pool, sql::SCHEDULE_DUE, now, limit).await
    }

    async fn schedule_fire(&self, f: &ScheduleFire) -> StoreResult<Fired> {
        let now = ms(f.now);
        let mut tx = self.pool.begin().await?;
        let moved = sqlx::query(sql::SCHEDULE_FIRE_CURSOR)
            .bind(f.next_spec_at.map(ms))
            .bind(f.buffered_at.map(ms))
            .bind(f.next_fire_at.map(ms))
            .bind(&f.state_reason)
            .bind(now)
            .bind(&f.schedule_id)
            .bind(f.version)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if moved == 0 {
            tx.rollback().await?;
            return Ok(Fired::Stale);
        }
        if let Some(task) = &f.cancel_task_id {
            // Flow: each change with its event, in the same statement.
            sqlx::query(sql::SCHEDULE_FIRE_CANCEL)
                .bind(now)
                .bind(task)
                .execute(&mut *tx)
                .await?;
            sqlx::query(sql::SCHEDULE_FIRE_CANCEL_LEASED)
                .bind(now)
                .bind(task)
                .execute(&mut *tx)
                .await?;
        }
        let mut out = Vec::with_capacity(f.runs.len());
        for run in &f.runs {
            let Some(first) = run.tasks.first() else {
                continue;
            };
            let fire = ms(run.fire_time);
            let recorded = record_run::<Postgres>(&mut tx, &RUN_SQL, f, run, first, now).await?;
            let made = if !recorded {
                None
            } else if let [t] = run.tasks.as_slice()
                && is_plain(t)
            {
                // One plain task: one statement, schedule columns included.
                insert_task(&mut tx, t, &f.schedule_id, fire, now).await?;
                Some(vec![Inserted {
                    task_id: t.id.clone(),
                    deduplicated: false,
                }])
            } else {
                // Keys, routing, copies, a concurrency key: the submit statement
                // (the queues are notified below), then the schedule columns.
                let made = PostgresStore::insert_on(&mut tx, &run.tasks, f.now, "").await?;
                let ids: Vec<&str> = made
                    .iter()
                    .filter(|r| !r.deduplicated)
                    .map(|r| r.task_id.as_str())
                    .collect();
                sqlx::query(sql::SCHEDULE_FIRE_MARK)
                    .bind(&f.schedule_id)
                    .bind(fire)
                    .bind(&ids)
                    .execute(&mut *tx)
                    .await?;
                Some(made)
            };
            let (task_id, inserted) =
                run_task::<Postgres>(&mut tx, &RUN_SQL, f, fire, first, made.as_deref()).await?;
            out.push(run.fired(task_id, inserted));
        }
        let (last_fire, last_task, n) = fired_summary(&out);
        if let (Some(last_fire), Some(last_task)) = (last_fire, last_task) {
            sqlx::query(sql::SCHEDULE_FIRE_SUMMARY)
                .bind(n as i64)
                .bind(last_fire)
                .bind(last_task)
                .bind(&f.schedule_id)
                .execute(&mut *tx)
                .await?;
        }
        let queues: Vec<&str> = out
            .iter()
            .filter(|r| r.inserted)
            .map(|r| r.queue.as_str())
            .collect();
        PostgresStore::notify(&mut tx, &queues).await?;
        tx.commit().await?;
        Ok(Fired::Done(out))
    }

    async fn schedule_run_list(
        &self,
        f: &ScheduleRunFilter,
    ) -> StoreResult<Vec<ScheduleRunRecord>> {
        // Dynamic: the filters and the page are optional.
        let mut qb = sqlx::QueryBuilder::<Postgres>::new(sql::SCHEDULE_RUN_LIST_HEAD);
        qb.push_bind(&f.schedule_id);
        if let Some(before) = f.before_fire_time {
            qb.push(" AND r.fire_time < ").push_bind(ms(before));
        }
        qb.push(" ORDER BY r.fire_time DESC LIMIT ")
            .push_bind(i64::from(f.limit));
        records(qb.build_query_as::<RunRow>().fetch_all(&self.pool).await?)
    }
}
