//! Schedules on SQLite: writes run in the writer's batch transaction (so a fire's
//! run rows, tasks and cursor commit together), reads on the reader pool.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};
use sqlx::{Sqlite, SqlitePool};

use super::super::row::ms;
use super::super::schedules::{RunRow, ScheduleRow, fired_summary, spec_json, template_json};
use super::super::*;

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

pub(super) fn schedule_insert(c: &Connection, s: &ScheduleRecord) -> StoreResult<bool> {
    let mut p: Vec<Box<dyn rusqlite::ToSql>> = definition_params(s).into_iter().collect();
    p.push(Box::new(s.state_reason.clone()));
    p.push(Box::new(s.created_by.clone()));
    p.push(Box::new(ms(s.created_at)));
    let n = c
        .prepare_cached(
            "INSERT INTO schedules (id, spec, start_time, end_time, template, payload, overlap, \
             misfire, catchup_window_ms, paused, max_runs, next_spec_at, buffered_at, \
             next_fire_at, state_reason, created_by, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?17) \
             ON CONFLICT (id) DO NOTHING",
        )?
        .execute(rusqlite::params_from_iter(p.iter()))?;
    Ok(n == 1)
}

pub(super) fn schedule_update(
    c: &Connection,
    s: &ScheduleRecord,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let mut p: Vec<Box<dyn rusqlite::ToSql>> = definition_params(s).into_iter().collect();
    p.push(Box::new(s.state_reason.clone()));
    p.push(Box::new(ms(now)));
    p.push(Box::new(s.version));
    let n = c
        .prepare_cached(
            "UPDATE schedules SET spec = ?2, start_time = ?3, end_time = ?4, template = ?5, \
             payload = ?6, overlap = ?7, misfire = ?8, catchup_window_ms = ?9, paused = ?10, \
             max_runs = ?11, next_spec_at = ?12, buffered_at = ?13, next_fire_at = ?14, \
             state_reason = ?15, updated_at = ?16, version = version + 1 \
             WHERE id = ?1 AND version = ?17",
        )?
        .execute(rusqlite::params_from_iter(p.iter()))?;
    Ok(n == 1)
}

pub(super) fn schedule_delete(c: &Connection, id: &str) -> StoreResult<bool> {
    c.prepare_cached("DELETE FROM schedule_runs WHERE schedule_id = ?1")?
        .execute([id])?;
    let n = c
        .prepare_cached("DELETE FROM schedules WHERE id = ?1")?
        .execute([id])?;
    Ok(n == 1)
}

pub(super) fn schedule_fire(c: &Connection, f: &ScheduleFire) -> StoreResult<Fired> {
    let now = ms(f.now);
    let moved = c
        .prepare_cached(
            "UPDATE schedules SET next_spec_at = ?1, buffered_at = ?2, next_fire_at = ?3, \
             state_reason = ?4, updated_at = ?5, version = version + 1 \
             WHERE id = ?6 AND version = ?7",
        )?
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
            .prepare_cached(
                "UPDATE tasks SET state = 'cancelled', finished_at = ?1, updated_at = ?1 \
                 WHERE id = ?2 AND state = 'pending' RETURNING queue, attempt",
            )?
            .query_row(params![now, task], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if let Some((q, a)) = &gone {
            let e = super::flow::simple(task, q, EventKind::Cancelled, "cancelled", *a, now);
            super::events::push(e);
        }
        let asked: Option<(String, i64)> = c
            .prepare_cached(
                "UPDATE tasks SET cancel_requested = 1, updated_at = ?1 \
                 WHERE id = ?2 AND state = 'leased' RETURNING queue, attempt",
            )?
            .query_row(params![now, task], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if let Some((q, a)) = &asked {
            super::events::push(super::flow::simple(
                task,
                q,
                EventKind::Updated,
                "leased",
                *a,
                now,
            ));
        }
    }
    let mut out = Vec::with_capacity(f.runs.len());
    for run in &f.runs {
        let Some(first) = run.tasks.first() else {
            continue;
        };
        let fire = ms(run.fire_time);
        let recorded = c
            .prepare_cached(
                "INSERT INTO schedule_runs (schedule_id, fire_time, task_id, triggered, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
            )?
            .execute(params![f.schedule_id, fire, first.id, run.triggered, now])?
            == 1;
        let (task_id, inserted) = if recorded {
            let made = super::ops::task_insert_many(c, &run.tasks, f.now)?;
            let mut mark = c.prepare_cached(
                "UPDATE tasks SET schedule_id = ?1, fire_time = ?2 WHERE id = ?3",
            )?;
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
                    c.prepare_cached(
                        "UPDATE schedule_runs SET task_id = ?1 \
                         WHERE schedule_id = ?2 AND fire_time = ?3",
                    )?
                    .execute(params![r.task_id, f.schedule_id, fire])?;
                    (r.task_id.clone(), false)
                }
                _ => (first.id.clone(), true),
            }
        } else {
            let id = c
                .prepare_cached(
                    "SELECT task_id FROM schedule_runs WHERE schedule_id = ?1 AND fire_time = ?2",
                )?
                .query_row(params![f.schedule_id, fire], |r| r.get(0))
                .optional()?
                .unwrap_or_default();
            (id, false)
        };
        out.push(FiredRun {
            fire_time: run.fire_time,
            task_id,
            queue: first.queue.clone(),
            inserted,
            copies: run.tasks.len(),
        });
    }
    let (last_fire, last_task, n) = fired_summary(&out);
    if let (Some(last_fire), Some(last_task)) = (last_fire, last_task) {
        c.prepare_cached(
            "UPDATE schedules SET runs = runs + ?1, \
             last_fire_at = MAX(COALESCE(last_fire_at, ?2), ?2), last_task_id = ?3 WHERE id = ?4",
        )?
        .execute(params![n as i64, last_fire, last_task, f.schedule_id])?;
    }
    Ok(Fired::Done(out))
}

/// Whether the run of `first` may name `holder`, the task holding its key.
fn may_hold(c: &Connection, first: &NewTask, holder: &str) -> StoreResult<bool> {
    let metadata: Option<String> = c
        .prepare_cached("SELECT metadata FROM tasks WHERE id = ?1")?
        .query_row([holder], |r| r.get(0))
        .optional()?;
    Ok(super::super::flow::run_may_name(first, metadata.as_deref()))
}

pub(super) async fn schedule_get(r: &SqlitePool, id: &str) -> StoreResult<Option<ScheduleRecord>> {
    sqlx::query_as::<_, ScheduleRow>("SELECT * FROM schedules WHERE id = ?")
        .bind(id)
        .fetch_optional(r)
        .await?
        .map(ScheduleRow::into_record)
        .transpose()
}

pub(super) async fn schedule_list(
    r: &SqlitePool,
    f: &ScheduleFilter,
) -> StoreResult<Vec<ScheduleRecord>> {
    let mut qb = sqlx::QueryBuilder::<Sqlite>::new("SELECT * FROM schedules WHERE 1 = 1");
    if let Some(by) = &f.created_by {
        qb.push(" AND created_by = ").push_bind(by);
    }
    if let Some(after) = &f.after_id {
        qb.push(" AND id > ").push_bind(after);
    }
    qb.push(" ORDER BY id LIMIT ").push_bind(f.limit);
    qb.build_query_as::<ScheduleRow>()
        .fetch_all(r)
        .await?
        .into_iter()
        .map(ScheduleRow::into_record)
        .collect()
}

#[derive(sqlx::FromRow)]
struct DueRow {
    #[sqlx(flatten)]
    schedule: ScheduleRow,
    previous_unfinished: Option<bool>,
}

pub(super) async fn schedule_due(
    r: &SqlitePool,
    now: DateTime<Utc>,
    limit: u32,
) -> StoreResult<Vec<DueSchedule>> {
    sqlx::query_as::<_, DueRow>(
        "SELECT s.*, t.state IN ('pending', 'leased') AS previous_unfinished \
         FROM schedules s LEFT JOIN tasks t ON t.id = s.last_task_id \
         WHERE s.next_fire_at IS NOT NULL AND s.paused = 0 AND s.next_fire_at <= ? \
         ORDER BY s.next_fire_at LIMIT ?",
    )
    .bind(ms(now))
    .bind(limit)
    .fetch_all(r)
    .await?
    .into_iter()
    .map(|d| {
        Ok(DueSchedule {
            schedule: d.schedule.into_record()?,
            previous_unfinished: d.previous_unfinished.unwrap_or(false),
        })
    })
    .collect()
}

pub(super) async fn schedule_run_list(
    r: &SqlitePool,
    f: &ScheduleRunFilter,
) -> StoreResult<Vec<ScheduleRunRecord>> {
    let mut qb = sqlx::QueryBuilder::<Sqlite>::new(
        "SELECT r.fire_time, r.task_id, r.triggered, t.state, t.run_at FROM schedule_runs r \
         LEFT JOIN tasks t ON t.id = r.task_id WHERE r.schedule_id = ",
    );
    qb.push_bind(&f.schedule_id);
    if let Some(before) = f.before_fire_time {
        qb.push(" AND r.fire_time < ").push_bind(ms(before));
    }
    qb.push(" ORDER BY r.fire_time DESC LIMIT ")
        .push_bind(f.limit);
    Ok(qb
        .build_query_as::<RunRow>()
        .fetch_all(r)
        .await?
        .into_iter()
        .map(RunRow::into_record)
        .collect())
}
