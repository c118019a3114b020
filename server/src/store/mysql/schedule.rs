//! Schedules on MySQL. A fire moves the schedule's cursor by its version
//! (`UPDATE ... WHERE version = ?` locks the row; a replica firing the same
//! schedule meanwhile waits, then finds the version moved and answers Stale),
//! and records its runs and tasks in the same transaction: each fire time
//! fires once across replicas.

use chrono::{DateTime, Utc};
use sqlx::{MySql, MySqlPool};

use super::super::flow::run_may_name;
use super::super::row::ms;
use super::super::schedules::{RunRow, ScheduleRow, fired_summary, spec_json, template_json};
use super::super::*;
use super::Job;
use super::observe::simple;

type Definition<'a> = sqlx::query::Query<'a, MySql, sqlx::mysql::MySqlArguments>;

/// Binds the definition columns, in the order the statements below name them.
fn bind_definition<'a>(q: Definition<'a>, s: &'a ScheduleRecord) -> Definition<'a> {
    q.bind(spec_json(&s.spec))
        .bind(s.start_time.map(ms))
        .bind(s.end_time.map(ms))
        .bind(template_json(&s.template))
        .bind(&s.template.payload)
        .bind(s.overlap.as_str())
        .bind(s.misfire.as_str())
        .bind(row::duration_ms(s.catchup_window))
        .bind(s.paused)
        .bind(i64::from(s.max_runs))
        .bind(s.next_spec_at.map(ms))
        .bind(s.buffered_at.map(ms))
        .bind(s.next_fire_at.map(ms))
        .bind(&s.state_reason)
}

pub(super) async fn insert(r: &MySqlPool, s: &ScheduleRecord) -> StoreResult<bool> {
    let q = sqlx::query(
        "INSERT IGNORE INTO schedules (spec, start_time, end_time, template, payload, overlap, \
         misfire, catchup_window_ms, paused, max_runs, next_spec_at, buffered_at, \
         next_fire_at, state_reason, id, created_by, created_at, updated_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    );
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

pub(super) async fn update(
    r: &MySqlPool,
    s: &ScheduleRecord,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let q = sqlx::query(
        "UPDATE schedules SET spec = ?, start_time = ?, end_time = ?, template = ?, \
         payload = ?, overlap = ?, misfire = ?, catchup_window_ms = ?, paused = ?, \
         max_runs = ?, next_spec_at = ?, buffered_at = ?, next_fire_at = ?, \
         state_reason = ?, updated_at = ?, version = version + 1 \
         WHERE id = ? AND version = ?",
    );
    let n = bind_definition(q, s)
        .bind(ms(now))
        .bind(&s.id)
        .bind(s.version)
        .execute(r)
        .await?
        .rows_affected();
    Ok(n == 1)
}

pub(super) async fn delete(r: &MySqlPool, id: &str) -> StoreResult<bool> {
    let mut tx = r.begin().await?;
    sqlx::query("DELETE FROM schedule_runs WHERE schedule_id = ?")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    let n = sqlx::query("DELETE FROM schedules WHERE id = ?")
        .bind(id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok(n == 1)
}

pub(super) async fn fire(j: &mut Job, f: &ScheduleFire) -> StoreResult<Fired> {
    let now = ms(f.now);
    let moved = sqlx::query(
        "UPDATE schedules SET next_spec_at = ?, buffered_at = ?, next_fire_at = ?, \
         state_reason = ?, updated_at = ?, version = version + 1 \
         WHERE id = ? AND version = ?",
    )
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
            sqlx::query_as("SELECT seq, state, queue, attempt FROM tasks WHERE id = ? FOR UPDATE")
                .bind(task)
                .fetch_optional(j.conn())
                .await?;
        match row {
            Some((seq, state, q, a)) if state == "pending" => {
                sqlx::query(
                    "UPDATE tasks SET state = 'cancelled', finished_at = ?, updated_at = ? \
                     WHERE seq = ?",
                )
                .bind(now)
                .bind(now)
                .bind(seq)
                .execute(j.conn())
                .await?;
                j.push(simple(task, &q, EventKind::Cancelled, "cancelled", a, now));
            }
            Some((seq, state, q, a)) if state == "leased" => {
                sqlx::query(
                    "UPDATE tasks SET cancel_requested = TRUE, updated_at = ? WHERE seq = ?",
                )
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
        let recorded = sqlx::query(
            "INSERT IGNORE INTO schedule_runs (schedule_id, fire_time, task_id, triggered, \
             created_at) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(&f.schedule_id)
        .bind(fire)
        .bind(&first.id)
        .bind(run.triggered)
        .bind(now)
        .execute(j.conn())
        .await?
        .rows_affected()
            == 1;
        let (task_id, inserted) = if recorded {
            let made = super::ops::task_insert_many(j, &run.tasks, f.now).await?;
            let fresh: Vec<&str> = made
                .iter()
                .filter(|r| !r.deduplicated)
                .map(|r| r.task_id.as_str())
                .collect();
            if !fresh.is_empty() {
                let mut q =
                    sqlx::QueryBuilder::<sqlx::MySql>::new("UPDATE tasks SET schedule_id = ");
                q.push_bind(&f.schedule_id)
                    .push(", fire_time = ")
                    .push_bind(fire)
                    .push(" WHERE id IN (");
                let mut ids = q.separated(", ");
                for id in &fresh {
                    ids.push_bind(*id);
                }
                q.push(")");
                q.build().execute(j.conn()).await?;
            }
            let holder = match made.first() {
                Some(r) if r.deduplicated => {
                    let m: Option<String> =
                        sqlx::query_scalar("SELECT metadata FROM tasks WHERE id = ?")
                            .bind(&r.task_id)
                            .fetch_optional(j.conn())
                            .await?;
                    Some(run_may_name(first, m.as_deref()))
                }
                _ => None,
            };
            match made.first() {
                // The key was taken by a task the schedule's producer may not
                // see: the run keeps the id of the task it did not make.
                Some(r) if r.deduplicated && holder == Some(false) => (first.id.clone(), false),
                // The key was taken: the run names the task holding it.
                Some(r) if r.deduplicated => {
                    sqlx::query(
                        "UPDATE schedule_runs SET task_id = ? \
                         WHERE schedule_id = ? AND fire_time = ?",
                    )
                    .bind(&r.task_id)
                    .bind(&f.schedule_id)
                    .bind(fire)
                    .execute(j.conn())
                    .await?;
                    (r.task_id.clone(), false)
                }
                _ => (first.id.clone(), true),
            }
        } else {
            let id = sqlx::query_scalar::<_, String>(
                "SELECT task_id FROM schedule_runs WHERE schedule_id = ? AND fire_time = ?",
            )
            .bind(&f.schedule_id)
            .bind(fire)
            .fetch_optional(j.conn())
            .await?
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
        sqlx::query(
            "UPDATE schedules SET runs = runs + ?, \
             last_fire_at = GREATEST(COALESCE(last_fire_at, ?), ?), last_task_id = ? WHERE id = ?",
        )
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

pub(super) async fn get(r: &MySqlPool, id: &str) -> StoreResult<Option<ScheduleRecord>> {
    sqlx::query_as::<_, ScheduleRow>("SELECT * FROM schedules WHERE id = ?")
        .bind(id)
        .fetch_optional(r)
        .await?
        .map(ScheduleRow::into_record)
        .transpose()
}

pub(super) async fn list(r: &MySqlPool, f: &ScheduleFilter) -> StoreResult<Vec<ScheduleRecord>> {
    let mut qb = sqlx::QueryBuilder::<MySql>::new("SELECT * FROM schedules WHERE 1 = 1");
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

pub(super) async fn due(
    r: &MySqlPool,
    now: DateTime<Utc>,
    limit: u32,
) -> StoreResult<Vec<DueSchedule>> {
    sqlx::query_as::<_, DueRow>(
        "SELECT s.*, t.state IN ('pending', 'leased') AS previous_unfinished \
         FROM schedules s LEFT JOIN tasks t ON t.id = s.last_task_id \
         WHERE s.paused = FALSE AND s.next_fire_at IS NOT NULL AND s.next_fire_at <= ? \
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

pub(super) async fn run_list(
    r: &MySqlPool,
    f: &ScheduleRunFilter,
) -> StoreResult<Vec<ScheduleRunRecord>> {
    let mut qb = sqlx::QueryBuilder::<MySql>::new(
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
