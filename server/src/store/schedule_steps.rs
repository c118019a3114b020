//! The steps of `Schedules` that read and write alike on every sqlx database
//! (the due read on all three; the delete and a definition's binds on
//! Postgres and MySQL, whose writes go through sqlx), each called with the
//! backend's statements and pool.

use chrono::{DateTime, Utc};

use super::row::IntoRecord;
use super::row::{duration_ms, ms};
use super::schedules::{ScheduleRow, spec_json, template_json};
use super::{DueSchedule, ScheduleRecord, StoreResult};

/// A due schedule's row: the schedule and whether its previous run's task is
/// unfinished (every database).
#[derive(sqlx::FromRow)]
pub(crate) struct DueRow {
    #[sqlx(flatten)]
    schedule: ScheduleRow,
    previous_unfinished: Option<bool>,
}

/// `Schedules::schedule_due` from the backend's `SCHEDULE_DUE` (bound: now,
/// ms; the limit). The same read on every database.
pub(crate) async fn schedule_due_of<DB>(
    pool: &sqlx::Pool<DB>,
    stmt: &'static str,
    now: DateTime<Utc>,
    limit: u32,
) -> StoreResult<Vec<DueSchedule>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    DueRow: for<'r> sqlx::FromRow<'r, DB::Row>,
{
    sqlx::query_as::<DB, DueRow>(stmt)
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

/// `Schedules::schedule_delete` on a database sqlx writes to (Postgres,
/// MySQL): the backend's `SCHEDULE_DELETE_RUNS`, then `SCHEDULE_DELETE`, in
/// one transaction (bound: the id).
pub(crate) async fn schedule_delete_of<DB>(
    pool: &sqlx::Pool<DB>,
    [runs, schedule]: [&'static str; 2],
    id: &str,
) -> StoreResult<bool>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    DB::QueryResult: super::row::RowsAffected,
{
    use super::row::RowsAffected as _;
    let mut tx = pool.begin().await?;
    sqlx::query::<DB>(runs).bind(id).execute(&mut *tx).await?;
    let n = sqlx::query::<DB>(schedule)
        .bind(id)
        .execute(&mut *tx)
        .await?
        .rows();
    tx.commit().await?;
    Ok(n == 1)
}

/// A schedule's definition columns (its spec through its state reason), bound
/// in the order the backend's `SCHEDULE_INSERT` and `SCHEDULE_UPDATE` take
/// them after what comes before (Postgres, MySQL).
pub(crate) fn bind_definition<'q, DB>(
    q: sqlx::query::Query<'q, DB, DB::Arguments>,
    s: &ScheduleRecord,
) -> sqlx::query::Query<'q, DB, DB::Arguments>
where
    DB: sqlx::Database,
    String: for<'t> sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    Option<i64>: for<'t> sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    i64: for<'t> sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    bool: for<'t> sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> &'t [u8]: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> &'t str: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> Option<&'t str>: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
{
    q.bind(spec_json(&s.spec))
        .bind(s.start_time.map(ms))
        .bind(s.end_time.map(ms))
        .bind(template_json(&s.template))
        .bind(s.template.payload.as_slice())
        .bind(s.overlap.as_str())
        .bind(s.misfire.as_str())
        .bind(duration_ms(s.catchup_window))
        .bind(s.paused)
        .bind(i64::from(s.max_runs))
        .bind(s.next_spec_at.map(ms))
        .bind(s.buffered_at.map(ms))
        .bind(s.next_fire_at.map(ms))
        .bind(s.state_reason.as_deref())
}
