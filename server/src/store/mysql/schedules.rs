//! Schedules on MySQL. A fire moves the schedule's cursor by its version
//! (`UPDATE ... WHERE version = ?` locks the row; a replica firing the same
//! schedule meanwhile waits, then finds the version moved and answers Stale),
//! and records its runs and tasks in the same transaction: each fire time
//! fires once across replicas.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::MySql;

use super::super::row::ms;
use super::super::row::{record, records};
use super::super::schedule_steps::{bind_definition, schedule_delete_of, schedule_due_of};
use super::super::schedules::{RunRow, RunSql, ScheduleRow, fired_summary, record_run, run_task};
use super::super::*;
use super::tx::simple;
use super::{Job, MysqlStore, bound_last, marks, sql};

#[async_trait]
impl Schedules for MysqlStore {
    async fn schedule_insert(&self, s: &ScheduleRecord) -> StoreResult<bool> {
        let r = &self.pool;
        let q = sqlx::query(sql::SCHEDULE_INSERT);
        let n = bind_definition(q, s)
            .bind(&s.id)
            .bind(&s.created_by)
            .bind(ms(s.created_at))
            .bind(ms(s.created_at))
            .execute(r)
            .await?
            .rows_affected();
        Ok(n == 1)
    }

    async fn schedule_get(&self, id: &str) -> StoreResult<Option<ScheduleRecord>> {
        let r = &self.pool;
        record(
            sqlx::query_as::<_, ScheduleRow>(sql::SCHEDULE_GET)
                .bind(id)
                .fetch_optional(r)
                .await?,
        )
    }

    async fn schedule_list(&self, f: &ScheduleFilter) -> StoreResult<Vec<ScheduleRecord>> {
        let r = &self.pool;
        // Dynamic: the WHERE holds the filters given.
        let mut qb = sqlx::QueryBuilder::<MySql>::new(sql::SCHEDULE_LIST_HEAD);
        if let Some(by) = &f.created_by {
            qb.push(" AND created_by = ").push_bind(by);
        }
        if let Some(after) = &f.after_id {
            qb.push(" AND id > ").push_bind(after);
        }
        qb.push(" ORDER BY id LIMIT ").push_bind(f.limit);
        records(qb.build_query_as::<ScheduleRow>().fetch_all(r).await?)
    }

    async fn schedule_update(&self, s: &ScheduleRecord, now: DateTime<Utc>) -> StoreResult<bool> {
        let r = &self.pool;
        let q = sqlx::query(sql::SCHEDULE_UPDATE);
        let n = bind_definition(q, s)
            .bind(ms(now))
            .bind(&s.id)
            .bind(s.version)
            .execute(r)
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
        job!(self, |j| fire(j, f).await)
    }

    async fn schedule_run_list(
        &self,
        f: &ScheduleRunFilter,
    ) -> StoreResult<Vec<ScheduleRunRecord>> {
        let r = &self.pool;
        // Dynamic: the WHERE holds the filters given.
        let mut qb = sqlx::QueryBuilder::<MySql>::new(bound_last(sql::SCHEDULE_RUN_LIST_HEAD));
        qb.push_bind(&f.schedule_id);
        if let Some(before) = f.before_fire_time {
            qb.push(" AND r.fire_time < ").push_bind(ms(before));
        }
        qb.push(" ORDER BY r.fire_time DESC LIMIT ")
            .push_bind(f.limit);
        records(qb.build_query_as::<RunRow>().fetch_all(r).await?)
    }
}

/// Binds the definition columns, in the order the statements below name them.
const RUN_SQL: RunSql = RunSql {
    run: sql::SCHEDULE_FIRE_RUN,
    holder: sql::SCHEDULE_FIRE_HOLDER,
    run_holder: sql::SCHEDULE_FIRE_RUN_HOLDER,
    run_task: sql::SCHEDULE_FIRE_RUN_TASK,
};

async fn fire(j: &mut Job, f: &ScheduleFire) -> StoreResult<Fired> {
    let now = ms(f.now);
    let moved = sqlx::query(sql::SCHEDULE_FIRE_CURSOR)
        .bind(f.next_spec_at.map(ms))
        .bind(f.buffered_at.map(ms))
        .bind(f.next_fire_at.map(ms))
        .bind(&f.state_reason)
        .bind(now)
        .bind(&f.schedule_id)
        .bind(f.version)
        .execute(j.conn())
        .await?
        .rows_affected();
    if moved == 0 {
        return Ok(Fired::Stale);
    }
    if let Some(task) = &f.cancel_task_id {
        use crate::domain::event::EventKind;
        let row: Option<(i64, String, String, i64)> =
            sqlx::query_as(sql::SCHEDULE_FIRE_CANCEL_PICK)
                .bind(task)
                .fetch_optional(j.conn())
                .await?;
        match row {
            Some((seq, state, q, a)) if state == "pending" => {
                sqlx::query(sql::SCHEDULE_FIRE_CANCEL)
                    .bind(now)
                    .bind(now)
                    .bind(seq)
                    .execute(j.conn())
                    .await?;
                j.push(simple(task, &q, EventKind::Cancelled, "cancelled", a, now));
            }
            Some((seq, state, q, a)) if state == "leased" => {
                sqlx::query(sql::SCHEDULE_FIRE_CANCEL_LEASED)
                    .bind(now)
                    .bind(seq)
                    .execute(j.conn())
                    .await?;
                j.push(simple(task, &q, EventKind::Updated, "leased", a, now));
            }
            _ => {}
        }
    }
    let mut out = Vec::with_capacity(f.runs.len());
    for run in &f.runs {
        let Some(first) = run.tasks.first() else {
            continue;
        };
        let fire = ms(run.fire_time);
        let recorded = record_run::<MySql>(j.conn(), &RUN_SQL, f, run, first, now).await?;
        let made = if recorded {
            let made = super::rows::insert_many(j, &run.tasks, f.now).await?;
            let fresh: Vec<&str> = made
                .iter()
                .filter(|r| !r.deduplicated)
                .map(|r| r.task_id.as_str())
                .collect();
            if !fresh.is_empty() {
                // Dynamic: one placeholder per task made.
                let text = format!("{}{})", sql::SCHEDULE_FIRE_MARK, marks(fresh.len()));
                let mut q = sqlx::query(sqlx::AssertSqlSafe(text))
                    .bind(&f.schedule_id)
                    .bind(fire);
                for id in &fresh {
                    q = q.bind(*id);
                }
                q.execute(j.conn()).await?;
            }
            Some(made)
        } else {
            None
        };
        let (task_id, inserted) =
            run_task::<MySql>(j.conn(), &RUN_SQL, f, fire, first, made.as_deref()).await?;
        out.push(run.fired(task_id, inserted));
    }
    let (last_fire, last_task, n) = fired_summary(&out);
    if let (Some(last_fire), Some(last_task)) = (last_fire, last_task) {
        sqlx::query(sql::SCHEDULE_FIRE_SUMMARY)
            .bind(n as i64)
            .bind(last_fire)
            .bind(last_fire)
            .bind(last_task)
            .bind(&f.schedule_id)
            .execute(j.conn())
            .await?;
    }
    Ok(Fired::Done(out))
}
