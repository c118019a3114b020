//! Schedules on SQLite: writes run in the writer's batch transaction (so a fire's
//! run rows, tasks and cursor commit together), reads on the reader pool.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};

use super::super::row::ms;
use super::super::row::{record, records};
use super::super::schedule_steps::schedule_due_of;
use super::super::schedules::{RunRow, ScheduleRow, fired_summary, spec_json, template_json};
use super::super::*;
use super::{SqliteStore, sql, tx};

/// `schedules` columns a definition write sets, in this order (?1 is the id).
fn definition_params(s: &ScheduleRecord) -> [Box<dyn rusqlite::ToSql>; 14] {
    [
        Box::new(s.id.clone()),
        Box::new(spec_json(&s.spec)),
        Box::new(s.start_time.map(ms)),
        Box::new(s.end_time.map(ms)),
        Box::new(template_json(&s.template)),
        Box::new(s.template.payload.clone()),
        Box::new(s.overlap.as_str()),
        Box::new(s.misfire.as_str()),
        Box::new(row::duration_ms(s.catchup_window)),
        Box::new(s.paused),
        Box::new(i64::from(s.max_runs)),
        Box::new(s.next_spec_at.map(ms)),
        Box::new(s.buffered_at.map(ms)),
        Box::new(s.next_fire_at.map(ms)),
    ]
}

#[async_trait]
impl Schedules for SqliteStore {
    async fn schedule_insert(&self, s: &ScheduleRecord) -> StoreResult<bool> {
        let s = s.clone();
        self.write(move |c| {
            let mut p: Vec<Box<dyn rusqlite::ToSql>> = definition_params(&s).into_iter().collect();
            p.push(Box::new(s.state_reason.clone()));
            p.push(Box::new(s.created_by.clone()));
            p.push(Box::new(ms(s.created_at)));
            let n = c
                .prepare_cached(sql::SCHEDULE_INSERT)?
                .execute(rusqlite::params_from_iter(p.iter()))?;
            Ok(n == 1)
        })
        .await
    }

    async fn schedule_get(&self, id: &str) -> StoreResult<Option<ScheduleRecord>> {
        record(
            sqlx::query_as::<_, ScheduleRow>(sql::SCHEDULE_GET)
                .bind(id)
                .fetch_optional(&self.reader)
                .await?,
        )
    }

    async fn schedule_list(&self, f: &ScheduleFilter) -> StoreResult<Vec<ScheduleRecord>> {
        // Dynamic: the filters given add their terms.
        let mut qb = sqlx::QueryBuilder::<sqlx::Sqlite>::new(sql::SCHEDULE_LIST_HEAD);
        if let Some(by) = &f.created_by {
            qb.push(" AND created_by = ").push_bind(by);
        }
        if let Some(after) = &f.after_id {
            qb.push(" AND id > ").push_bind(after);
        }
        qb.push(" ORDER BY id LIMIT ").push_bind(f.limit);
        records(
            qb.build_query_as::<ScheduleRow>()
                .fetch_all(&self.reader)
                .await?,
        )
    }

    async fn schedule_update(&self, s: &ScheduleRecord, now: DateTime<Utc>) -> StoreResult<bool> {
        let s = s.clone();
        self.write(move |c| {
            let mut p: Vec<Box<dyn rusqlite::ToSql>> = definition_params(&s).into_iter().collect();
            p.push(Box::new(s.state_reason.clone()));
            p.push(Box::new(ms(now)));
            p.push(Box::new(s.version));
            let n = c
                .prepare_cached(sql::SCHEDULE_UPDATE)?
                .execute(rusqlite::params_from_iter(p.iter()))?;
            Ok(n == 1)
        })
        .await
    }

    async fn schedule_delete(&self, id: &str) -> StoreResult<bool> {
        let id = id.to_owned();
        self.write(move |c| {
            c.prepare_cached(sql::SCHEDULE_DELETE_RUNS)?
                .execute([&id])?;
            let n = c.prepare_cached(sql::SCHEDULE_DELETE)?.execute([&id])?;
            Ok(n == 1)
        })
        .await
    }

    async fn schedule_due(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Vec<DueSchedule>> {
        schedule_due_of(&self.reader, sql::SCHEDULE_DUE, now, limit).await
    }

    async fn schedule_fire(&self, f: &ScheduleFire) -> StoreResult<Fired> {
        let f = f.clone();
        self.write(move |c| fire(c, &f)).await
    }

    async fn schedule_run_list(
        &self,
        f: &ScheduleRunFilter,
    ) -> StoreResult<Vec<ScheduleRunRecord>> {
        // Dynamic: the page bound, when given, adds its term.
        let mut sql = String::from(sql::SCHEDULE_RUN_LIST_HEAD);
        if f.before_fire_time.is_some() {
            sql.push_str(" AND r.fire_time < ?");
        }
        sql.push_str(" ORDER BY r.fire_time DESC LIMIT ?");
        let mut q = sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(sql)).bind(&f.schedule_id);
        if let Some(before) = f.before_fire_time {
            q = q.bind(ms(before));
        }
        records(q.bind(f.limit).fetch_all(&self.reader).await?)
    }
}

/// A fire: the cursor moved (if still at the version read), the previous run's
/// task cancelled when the overlap policy says so, each run recorded with its
/// tasks.
fn fire(c: &Connection, f: &ScheduleFire) -> StoreResult<Fired> {
    let now = ms(f.now);
    let moved = c
        .prepare_cached(sql::SCHEDULE_FIRE_CURSOR)?
        .execute(params![
            f.next_spec_at.map(ms),
            f.buffered_at.map(ms),
            f.next_fire_at.map(ms),
            f.state_reason,
            now,
            f.schedule_id,
            f.version
        ])?;
    if moved == 0 {
        return Ok(Fired::Stale);
    }
    if let Some(task) = &f.cancel_task_id {
        // Flow: each change with its event.
        use crate::domain::event::EventKind;
        let gone: Option<(String, i64)> = c
            .prepare_cached(sql::SCHEDULE_FIRE_CANCEL)?
            .query_row(params![now, task], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if let Some((q, a)) = &gone {
            tx::push(tx::simple(
                task,
                q,
                EventKind::Cancelled,
                "cancelled",
                *a,
                now,
            ));
        }
        let asked: Option<(String, i64)> = c
            .prepare_cached(sql::SCHEDULE_FIRE_CANCEL_LEASED)?
            .query_row(params![now, task], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if let Some((q, a)) = &asked {
            tx::push(tx::simple(task, q, EventKind::Updated, "leased", *a, now));
        }
    }
    let mut out = Vec::with_capacity(f.runs.len());
    for run in &f.runs {
        let Some(first) = run.tasks.first() else {
            continue;
        };
        let fire = ms(run.fire_time);
        let recorded = c.prepare_cached(sql::SCHEDULE_FIRE_RUN)?.execute(params![
            f.schedule_id,
            fire,
            first.id,
            run.triggered,
            now
        ])? == 1;
        let (task_id, inserted) = if recorded {
            let made = super::rows::insert_many(c, &run.tasks, f.now)?;
            let mut mark = c.prepare_cached(sql::SCHEDULE_FIRE_MARK)?;
            for r in made.iter().filter(|r| !r.deduplicated) {
                mark.execute(params![f.schedule_id, fire, r.task_id])?;
            }
            match made.first() {
                // The key was taken by a task the schedule's producer may not
                // see: the run keeps the id of the task it did not make.
                Some(r) if r.deduplicated && !may_hold(c, first, &r.task_id)? => {
                    (first.id.clone(), false)
                }
                // The key was taken: the run names the task holding it.
                Some(r) if r.deduplicated => {
                    c.prepare_cached(sql::SCHEDULE_FIRE_RUN_HOLDER)?
                        .execute(params![r.task_id, f.schedule_id, fire])?;
                    (r.task_id.clone(), false)
                }
                _ => (first.id.clone(), true),
            }
        } else {
            let id = c
                .prepare_cached(sql::SCHEDULE_FIRE_RUN_TASK)?
                .query_row(params![f.schedule_id, fire], |r| r.get(0))
                .optional()?
                .unwrap_or_default();
            (id, false)
        };
        out.push(run.fired(task_id, inserted));
    }
    let (last_fire, last_task, n) = fired_summary(&out);
    if let (Some(last_fire), Some(last_task)) = (last_fire, last_task) {
        c.prepare_cached(sql::SCHEDULE_FIRE_SUMMARY)?
            .execute(params![n as i64, last_fire, last_task, f.schedule_id])?;
    }
    Ok(Fired::Done(out))
}

/// Whether the run of `first` may name `holder`, the task holding its key.
fn may_hold(c: &Connection, first: &NewTask, holder: &str) -> StoreResult<bool> {
    let metadata: Option<String> = c
        .prepare_cached(sql::SCHEDULE_FIRE_HOLDER)?
        .query_row([holder], |r| r.get(0))
        .optional()?;
    Ok(super::super::flow::run_may_name(first, metadata.as_deref()))
}
