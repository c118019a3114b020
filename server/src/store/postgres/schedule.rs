//! Schedules on Postgres. A fire is one transaction: the cursor update is
//! conditional on the version read (a replica that read the same due schedule
//! waits for the row lock, then finds the version moved and writes nothing), and
//! each run row is keyed by (schedule_id, fire_time).

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Postgres};

use super::super::flow::run_may_name;
use super::super::row::{duration_ms, ms};
use super::super::schedules::{RunRow, ScheduleRow, fired_summary, spec_json, template_json};
use super::super::*;
use super::PostgresStore;

pub(super) async fn insert(pool: &PgPool, s: &ScheduleRecord) -> StoreResult<bool> {
    let n = sqlx::query(
        "INSERT INTO schedules (id, spec, start_time, end_time, template, payload, overlap, \
         misfire, catchup_window_ms, paused, max_runs, next_spec_at, buffered_at, \
         next_fire_at, state_reason, created_by, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $17) \
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(&s.id)
    .bind(spec_json(&s.spec))
    .bind(s.start_time.map(ms))
    .bind(s.end_time.map(ms))
    .bind(template_json(&s.template))
    .bind(&s.template.payload)
    .bind(s.overlap.as_str())
    .bind(s.misfire.as_str())
    .bind(duration_ms(s.catchup_window))
    .bind(s.paused)
    .bind(i64::from(s.max_runs))
    .bind(s.next_spec_at.map(ms))
    .bind(s.buffered_at.map(ms))
    .bind(s.next_fire_at.map(ms))
    .bind(&s.state_reason)
    .bind(&s.created_by)
    .bind(ms(s.created_at))
    .execute(pool)
    .await?
    .rows_affected();
    Ok(n == 1)
}

pub(super) async fn update(
    pool: &PgPool,
    s: &ScheduleRecord,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let n = sqlx::query(
        "UPDATE schedules SET spec = $2, start_time = $3, end_time = $4, template = $5, \
         payload = $6, overlap = $7, misfire = $8, catchup_window_ms = $9, paused = $10, \
         max_runs = $11, next_spec_at = $12, buffered_at = $13, next_fire_at = $14, \
         state_reason = $15, updated_at = $16, version = version + 1 \
         WHERE id = $1 AND version = $17",
    )
    .bind(&s.id)
    .bind(spec_json(&s.spec))
    .bind(s.start_time.map(ms))
    .bind(s.end_time.map(ms))
    .bind(template_json(&s.template))
    .bind(&s.template.payload)
    .bind(s.overlap.as_str())
    .bind(s.misfire.as_str())
    .bind(duration_ms(s.catchup_window))
    .bind(s.paused)
    .bind(i64::from(s.max_runs))
    .bind(s.next_spec_at.map(ms))
    .bind(s.buffered_at.map(ms))
    .bind(s.next_fire_at.map(ms))
    .bind(&s.state_reason)
    .bind(ms(now))
    .bind(s.version)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(n == 1)
}

pub(super) async fn delete(pool: &PgPool, id: &str) -> StoreResult<bool> {
    let mut tx = pool.begin().await?;
    sqlx::query("DELETE FROM schedule_runs WHERE schedule_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    let n = sqlx::query("DELETE FROM schedules WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok(n == 1)
}

pub(super) async fn fire(pool: &PgPool, f: &ScheduleFire) -> StoreResult<Fired> {
    let now = ms(f.now);
    let mut tx = pool.begin().await?;
    let moved = sqlx::query(
        "UPDATE schedules SET next_spec_at = $1, buffered_at = $2, next_fire_at = $3, \
         state_reason = $4, updated_at = $5, version = version + 1 \
         WHERE id = $6 AND version = $7",
    )
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
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "WITH u AS (UPDATE tasks t SET state = 'cancelled', finished_at = $1, updated_at = $1 \
             WHERE id = $2 AND state = 'pending' RETURNING t.id, t.queue, t.state, t.attempt, t.run_at) {}",
            super::events::from_updated("cancelled", "$1")
        )))
        .bind(now)
        .bind(task)
        .execute(&mut *tx)
        .await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "WITH u AS (UPDATE tasks t SET cancel_requested = TRUE, updated_at = $1 \
             WHERE id = $2 AND state = 'leased' RETURNING t.id, t.queue, t.state, t.attempt, t.run_at) {}",
            super::events::from_updated("updated", "$1")
        )))
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
        let recorded = sqlx::query(
            "INSERT INTO schedule_runs (schedule_id, fire_time, task_id, triggered, created_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        )
        .bind(&f.schedule_id)
        .bind(fire)
        .bind(&first.id)
        .bind(run.triggered)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        let (task_id, inserted) = if recorded {
            let made = if let [t] = run.tasks.as_slice()
                && is_plain(t)
            {
                // One plain task: one statement, schedule columns included.
                insert_task(&mut tx, t, &f.schedule_id, fire, now).await?;
                vec![Inserted {
                    task_id: t.id.clone(),
                    deduplicated: false,
                }]
            } else {
                // Keys, routing, copies, a concurrency key: the submit statement
                // (the queues are notified below), then the schedule columns.
                let made = PostgresStore::insert_on(&mut tx, &run.tasks, f.now, "").await?;
                let ids: Vec<&str> = made
                    .iter()
                    .filter(|r| !r.deduplicated)
                    .map(|r| r.task_id.as_str())
                    .collect();
                sqlx::query(
                    "UPDATE tasks SET schedule_id = $1, fire_time = $2 \
                     WHERE id = ANY($3::text[])",
                )
                .bind(&f.schedule_id)
                .bind(fire)
                .bind(&ids)
                .execute(&mut *tx)
                .await?;
                made
            };
            let holder = match made.first() {
                Some(r) if r.deduplicated => {
                    let m: Option<String> =
                        sqlx::query_scalar("SELECT metadata FROM tasks WHERE id = $1")
                            .bind(&r.task_id)
                            .fetch_optional(&mut *tx)
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
                        "UPDATE schedule_runs SET task_id = $1 \
                         WHERE schedule_id = $2 AND fire_time = $3",
                    )
                    .bind(&r.task_id)
                    .bind(&f.schedule_id)
                    .bind(fire)
                    .execute(&mut *tx)
                    .await?;
                    (r.task_id.clone(), false)
                }
                _ => (first.id.clone(), true),
            }
        } else {
            let id = sqlx::query_scalar(
                "SELECT task_id FROM schedule_runs WHERE schedule_id = $1 AND fire_time = $2",
            )
            .bind(&f.schedule_id)
            .bind(fire)
            .fetch_optional(&mut *tx)
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
            "UPDATE schedules SET runs = runs + $1, \
             last_fire_at = GREATEST(COALESCE(last_fire_at, $2), $2), last_task_id = $3 \
             WHERE id = $4",
        )
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
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "WITH u AS (INSERT INTO tasks (id, queue, key, payload, priority, run_at, deadline, state, \
         max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier, \
         max_backoff_ms, jitter, metadata, created_at, updated_at, schedule_id, fire_time, \
         waiting) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $8, $9, $10, $11, $12, $13, $14, \
         $14, $15, $16, $6 > $14) RETURNING id, queue, state, attempt, run_at) {}",
        super::events::from_updated("submitted", "$14")
    )))
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

pub(super) async fn get(pool: &PgPool, id: &str) -> StoreResult<Option<ScheduleRecord>> {
    sqlx::query_as::<_, ScheduleRow>("SELECT * FROM schedules WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await?
        .map(ScheduleRow::into_record)
        .transpose()
}

pub(super) async fn list(pool: &PgPool, f: &ScheduleFilter) -> StoreResult<Vec<ScheduleRecord>> {
    let mut qb = sqlx::QueryBuilder::<Postgres>::new("SELECT * FROM schedules WHERE 1 = 1");
    if let Some(by) = &f.created_by {
        qb.push(" AND created_by = ").push_bind(by);
    }
    if let Some(after) = &f.after_id {
        qb.push(" AND id COLLATE \"C\" > ").push_bind(after);
    }
    qb.push(" ORDER BY id COLLATE \"C\" LIMIT ")
        .push_bind(i64::from(f.limit));
    qb.build_query_as::<ScheduleRow>()
        .fetch_all(pool)
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
    pool: &PgPool,
    now: DateTime<Utc>,
    limit: u32,
) -> StoreResult<Vec<DueSchedule>> {
    sqlx::query_as::<_, DueRow>(
        "SELECT s.*, t.state IN ('pending', 'leased') AS previous_unfinished \
         FROM schedules s LEFT JOIN tasks t ON t.id = s.last_task_id \
         WHERE s.next_fire_at IS NOT NULL AND NOT s.paused AND s.next_fire_at <= $1 \
         ORDER BY s.next_fire_at LIMIT $2",
    )
    .bind(ms(now))
    .bind(i64::from(limit))
    .fetch_all(pool)
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
    pool: &PgPool,
    f: &ScheduleRunFilter,
) -> StoreResult<Vec<ScheduleRunRecord>> {
    let mut qb = sqlx::QueryBuilder::<Postgres>::new(
        "SELECT r.fire_time, r.task_id, r.triggered, t.state, t.run_at FROM schedule_runs r \
         LEFT JOIN tasks t ON t.id = r.task_id WHERE r.schedule_id = ",
    );
    qb.push_bind(&f.schedule_id);
    if let Some(before) = f.before_fire_time {
        qb.push(" AND r.fire_time < ").push_bind(ms(before));
    }
    qb.push(" ORDER BY r.fire_time DESC LIMIT ")
        .push_bind(i64::from(f.limit));
    Ok(qb
        .build_query_as::<RunRow>()
        .fetch_all(pool)
        .await?
        .into_iter()
        .map(RunRow::into_record)
        .collect())
}
