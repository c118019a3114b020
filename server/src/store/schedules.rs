//! What the stores keep of schedules and their runs, and the row shape both
//! databases share (spec and task template as JSON written here, times in ms).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::row::{IntoRecord, duration_ms, from_ms, ms};
use super::{NewTask, StoreError};
use crate::domain::routing::{Fanout, Sticky, Target};
use crate::domain::schedule::{Misfire, Overlap, Spec};
use crate::domain::{RetryPolicy, StoredState};

#[allow(unused_imports)]
use super::*;
use async_trait::async_trait;

/// The task a schedule makes at each fire time (retry defaults resolved).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskTemplate {
    pub queue: String,
    pub payload: Vec<u8>,
    pub priority: i32,
    pub retry: RetryPolicy,
    pub metadata: BTreeMap<String, String>,
    pub deadline_after: Option<Duration>,
    /// As a submitted task's: who may lease each task, sticky retries.
    pub target: Target,
    pub sticky: Option<Sticky>,
    /// Each fire time makes this many copies (a fan-out group).
    pub fanout: Option<Fanout>,
    pub concurrency_key: Option<String>,
    /// The key of each task, with `{fire_time}` and `{schedule_id}` substituted.
    pub key: Option<String>,
}

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleRecord {
    pub id: String,
    pub spec: Spec,
    pub start_time: Option<DateTime<Utc>>,
    pub end_time: Option<DateTime<Utc>>,
    pub template: TaskTemplate,
    pub overlap: Overlap,
    pub misfire: Misfire,
    pub catchup_window: Duration,
    pub paused: bool,
    /// 0: no limit.
    pub max_runs: u32,
    /// The first spec fire time not yet handled.
    pub next_spec_at: Option<DateTime<Utc>>,
    /// A fire time held for BUFFER_ONE.
    pub buffered_at: Option<DateTime<Utc>>,
    /// When the scheduler looks next; `None`: never.
    pub next_fire_at: Option<DateTime<Utc>>,
    pub last_fire_at: Option<DateTime<Utc>>,
    pub last_task_id: Option<String>,
    pub runs: u64,
    /// Set when the schedule completed, with why.
    pub state_reason: Option<String>,
    /// The producer that created it (when authentication is on).
    pub created_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Bumped by every write; writes name the version they were computed from.
    pub version: i64,
}

/// ListSchedules: ordered by id.
#[derive(Debug, Clone, Default)]
pub struct ScheduleFilter {
    /// Only the schedules this producer created.
    pub created_by: Option<String>,
    /// Only ids after this one (the page token).
    pub after_id: Option<String>,
    pub limit: u32,
}

/// A schedule due now, with what the overlap policy needs.
#[derive(Debug, Clone)]
pub struct DueSchedule {
    pub schedule: ScheduleRecord,
    /// The task of the latest run is pending or leased.
    pub previous_unfinished: bool,
}

/// One fire time to record, with its tasks (one, or a fan-out group's copies,
/// the first copy's id naming the run).
#[derive(Debug, Clone)]
pub struct NewRun {
    pub fire_time: DateTime<Utc>,
    pub tasks: Vec<NewTask>,
    /// Made by TriggerSchedule.
    pub triggered: bool,
}

impl NewRun {
    /// What was recorded of this run: its task (`task_id`, made now when
    /// `inserted`, else the one holding it), of the queue of its first task.
    pub(crate) fn fired(&self, task_id: String, inserted: bool) -> FiredRun {
        FiredRun {
            fire_time: self.fire_time,
            task_id,
            queue: self
                .tasks
                .first()
                .map(|t| t.queue.clone())
                .unwrap_or_default(),
            inserted,
            copies: self.tasks.len(),
        }
    }
}

/// One scheduler step for a schedule, applied in one transaction: the schedule's
/// cursor is written only if its version is still `version`; each run is recorded
/// under the key (schedule_id, fire_time) and its task inserted only if the run
/// was new. Nothing else can make a fire time fire twice.
#[derive(Debug, Clone)]
pub struct ScheduleFire {
    pub schedule_id: String,
    pub version: i64,
    pub runs: Vec<NewRun>,
    /// Cancel this task first (CANCEL_PREVIOUS): pending -> cancelled, leased -> cancel requested.
    pub cancel_task_id: Option<String>,
    pub next_spec_at: Option<DateTime<Utc>>,
    pub buffered_at: Option<DateTime<Utc>>,
    pub next_fire_at: Option<DateTime<Utc>>,
    pub state_reason: Option<String>,
    pub now: DateTime<Utc>,
}

/// What a fire did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fired {
    /// The schedule changed (another replica fired it, or it was updated or
    /// deleted) since it was read: nothing was written.
    Stale,
    /// Applied: one entry per run, in order.
    Done(Vec<FiredRun>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiredRun {
    pub fire_time: DateTime<Utc>,
    pub task_id: String,
    pub queue: String,
    /// False when the fire time had a run already (its task was not inserted
    /// again), or when its key was taken (`task_id` is then the task holding it).
    pub inserted: bool,
    /// Tasks the run made (its fan-out copies).
    pub copies: usize,
}

/// ListScheduleRuns: newest fire time first.
#[derive(Debug, Clone)]
pub struct ScheduleRunFilter {
    pub schedule_id: String,
    pub before_fire_time: Option<DateTime<Utc>>,
    pub limit: u32,
}

/// One recorded run, with its task's state now (`None` once the task is deleted).
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleRunRecord {
    pub fire_time: DateTime<Utc>,
    pub task_id: String,
    pub triggered: bool,
    pub task_state: Option<StoredState>,
    pub task_run_at: Option<DateTime<Utc>>,
    /// The task's last error (of its latest failed attempt), if any.
    pub task_last_error: Option<String>,
}

#[derive(serde::Serialize, serde::Deserialize, Default)]
struct SpecJson {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    cron: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    timezone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    every_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    anchor_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    once_at_ms: Option<i64>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct TemplateJson {
    queue: String,
    priority: i32,
    max_attempts: u32,
    initial_backoff_ms: i64,
    backoff_multiplier: f64,
    max_backoff_ms: i64,
    jitter: f64,
    metadata: BTreeMap<String, String>,
    deadline_after_ms: Option<i64>,
    // Routing, admission and the key template; absent when unset (and in
    // templates stored before they existed).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    target_worker: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    target_labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    sticky: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    sticky_timeout_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    fanout_copies: Option<u32>,
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    fanout_distinct: bool,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    concurrency_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    key: Option<String>,
}

pub(crate) fn spec_json(spec: &Spec) -> String {
    let j = match spec {
        Spec::Cron { expr, timezone } => SpecJson {
            cron: Some(expr.clone()),
            timezone: Some(timezone.clone()),
            ..SpecJson::default()
        },
        Spec::Every { every, anchor } => SpecJson {
            every_ms: Some(duration_ms(*every)),
            anchor_ms: Some(ms(*anchor)),
            ..SpecJson::default()
        },
        Spec::Once { at } => SpecJson {
            once_at_ms: Some(ms(*at)),
            ..SpecJson::default()
        },
    };
    serde_json::to_string(&j).unwrap_or_default()
}

fn parse_spec(id: &str, text: &str) -> Result<Spec, StoreError> {
    let bad = || StoreError::Corrupt(format!("schedule {id} spec {text:?}"));
    let j: SpecJson = serde_json::from_str(text).map_err(|_| bad())?;
    match (j.cron, j.every_ms, j.once_at_ms) {
        (Some(expr), None, None) => Ok(Spec::Cron {
            expr,
            timezone: j.timezone.unwrap_or_default(),
        }),
        (None, Some(every), None) => Ok(Spec::Every {
            every: Duration::from_millis(every.max(0) as u64),
            anchor: from_ms(j.anchor_ms.unwrap_or(0)),
        }),
        (None, None, Some(at)) => Ok(Spec::Once { at: from_ms(at) }),
        _ => Err(bad()),
    }
}

pub(crate) fn template_json(t: &TaskTemplate) -> String {
    let j = TemplateJson {
        queue: t.queue.clone(),
        priority: t.priority,
        max_attempts: t.retry.max_attempts,
        initial_backoff_ms: duration_ms(t.retry.initial_backoff),
        backoff_multiplier: t.retry.backoff_multiplier,
        max_backoff_ms: duration_ms(t.retry.max_backoff),
        jitter: t.retry.jitter,
        metadata: t.metadata.clone(),
        deadline_after_ms: t.deadline_after.map(duration_ms),
        target_worker: t.target.worker_id.clone(),
        target_labels: t.target.labels.clone(),
        sticky: t.sticky.map(|s| s.as_str().to_string()),
        sticky_timeout_ms: t.sticky.and_then(|s| s.timeout_ms()),
        fanout_copies: t.fanout.map(|f| f.copies),
        fanout_distinct: t.fanout.is_some_and(|f| f.distinct_workers),
        concurrency_key: t.concurrency_key.clone(),
        key: t.key.clone(),
    };
    serde_json::to_string(&j).unwrap_or_default()
}

fn parse_template(id: &str, text: &str, payload: Vec<u8>) -> Result<TaskTemplate, StoreError> {
    let j: TemplateJson = serde_json::from_str(text)
        .map_err(|e| StoreError::Corrupt(format!("schedule {id} template: {e}")))?;
    let d = |v: i64| Duration::from_millis(v.max(0) as u64);
    Ok(TaskTemplate {
        queue: j.queue,
        payload,
        priority: j.priority,
        retry: RetryPolicy {
            max_attempts: j.max_attempts,
            initial_backoff: d(j.initial_backoff_ms),
            backoff_multiplier: j.backoff_multiplier,
            max_backoff: d(j.max_backoff_ms),
            jitter: j.jitter,
        },
        metadata: j.metadata,
        deadline_after: j.deadline_after_ms.map(d),
        target: Target {
            worker_id: j.target_worker,
            labels: j.target_labels,
        },
        sticky: Sticky::parse(j.sticky.as_deref(), j.sticky_timeout_ms),
        fanout: j.fanout_copies.map(|copies| Fanout {
            copies,
            distinct_workers: j.fanout_distinct,
        }),
        concurrency_key: j.concurrency_key,
        key: j.key,
    })
}

/// A `schedules` row (every database).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ScheduleRow {
    pub id: String,
    pub spec: String,
    pub start_time: Option<i64>,
    pub end_time: Option<i64>,
    pub template: String,
    pub payload: Vec<u8>,
    pub overlap: String,
    pub misfire: String,
    pub catchup_window_ms: i64,
    pub paused: bool,
    pub max_runs: i64,
    pub next_spec_at: Option<i64>,
    pub buffered_at: Option<i64>,
    pub next_fire_at: Option<i64>,
    pub last_fire_at: Option<i64>,
    pub last_task_id: Option<String>,
    pub runs: i64,
    pub state_reason: Option<String>,
    pub created_by: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub version: i64,
}

impl IntoRecord for ScheduleRow {
    type Record = ScheduleRecord;
    fn into_record(self) -> Result<ScheduleRecord, StoreError> {
        let corrupt =
            |what: &str, v: &str| StoreError::Corrupt(format!("schedule {} {what} {v:?}", self.id));
        let overlap =
            Overlap::parse(&self.overlap).ok_or_else(|| corrupt("overlap", &self.overlap))?;
        let misfire =
            Misfire::parse(&self.misfire).ok_or_else(|| corrupt("misfire", &self.misfire))?;
        Ok(ScheduleRecord {
            spec: parse_spec(&self.id, &self.spec)?,
            template: parse_template(&self.id, &self.template, self.payload)?,
            start_time: self.start_time.map(from_ms),
            end_time: self.end_time.map(from_ms),
            overlap,
            misfire,
            catchup_window: Duration::from_millis(self.catchup_window_ms.max(0) as u64),
            paused: self.paused,
            max_runs: u32::try_from(self.max_runs.max(0)).unwrap_or(u32::MAX),
            next_spec_at: self.next_spec_at.map(from_ms),
            buffered_at: self.buffered_at.map(from_ms),
            next_fire_at: self.next_fire_at.map(from_ms),
            last_fire_at: self.last_fire_at.map(from_ms),
            last_task_id: self.last_task_id,
            runs: self.runs.max(0) as u64,
            state_reason: self.state_reason,
            created_by: self.created_by,
            created_at: from_ms(self.created_at),
            updated_at: from_ms(self.updated_at),
            version: self.version,
            id: self.id,
        })
    }
}

/// A `schedule_runs` row joined with its task.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct RunRow {
    pub fire_time: i64,
    pub task_id: String,
    pub triggered: bool,
    pub state: Option<String>,
    pub run_at: Option<i64>,
    pub last_error: Option<String>,
}

impl IntoRecord for RunRow {
    type Record = ScheduleRunRecord;
    fn into_record(self) -> Result<ScheduleRunRecord, StoreError> {
        Ok(ScheduleRunRecord {
            fire_time: from_ms(self.fire_time),
            task_id: self.task_id,
            triggered: self.triggered,
            task_state: self.state.as_deref().and_then(StoredState::parse),
            task_run_at: self.run_at.map(from_ms),
            task_last_error: self.last_error,
        })
    }
}

/// The last run's task id and queues to wake, from the runs a fire inserted.
pub(crate) fn fired_summary(runs: &[FiredRun]) -> (Option<i64>, Option<&str>, u64) {
    let inserted: Vec<&FiredRun> = runs.iter().filter(|r| r.inserted).collect();
    let last_fire = inserted.iter().map(|r| ms(r.fire_time)).max();
    let last_task = inserted.last().map(|r| r.task_id.as_str());
    (last_fire, last_task, inserted.len() as u64)
}

/// Schedules and their runs: definitions, the due scan, firing, the run history.
#[async_trait]
pub trait Schedules: Send + Sync + 'static {
    /// Inserts a new schedule; `false` when its id exists already.
    async fn schedule_insert(&self, s: &ScheduleRecord) -> StoreResult<bool>;

    async fn schedule_get(&self, id: &str) -> StoreResult<Option<ScheduleRecord>>;

    /// Schedules in id order, after `after_id`, up to `limit`.
    async fn schedule_list(&self, f: &ScheduleFilter) -> StoreResult<Vec<ScheduleRecord>>;

    /// Writes every changeable field of `s` (not runs, last fire, creator) if the
    /// stored version is still `s.version`, and bumps the version. `false`: it
    /// changed meanwhile or is gone; nothing was written.
    async fn schedule_update(&self, s: &ScheduleRecord, now: DateTime<Utc>) -> StoreResult<bool>;

    /// Deletes a schedule and its run history; `false` when there was none.
    async fn schedule_delete(&self, id: &str) -> StoreResult<bool>;

    /// Unpaused schedules with `next_fire_at <= now`, earliest first, up to
    /// `limit` (an index scan: the cost follows the schedules due).
    async fn schedule_due(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Vec<DueSchedule>>;

    /// Records runs, inserts their tasks and moves the cursor, in one transaction
    /// (see [`ScheduleFire`]).
    async fn schedule_fire(&self, f: &ScheduleFire) -> StoreResult<Fired>;

    /// The run history, newest fire time first.
    async fn schedule_run_list(&self, f: &ScheduleRunFilter)
    -> StoreResult<Vec<ScheduleRunRecord>>;
}

/// The statements of a fire's run steps, on a database sqlx writes to
/// (Postgres, MySQL): the backend's `SCHEDULE_FIRE_RUN`, `_HOLDER`,
/// `_RUN_HOLDER` and `_RUN_TASK`, which bind the same values on both.
pub(crate) struct RunSql {
    pub run: &'static str,
    pub holder: &'static str,
    pub run_holder: &'static str,
    pub run_task: &'static str,
}

/// Records the run of `fire` (whose first task is `first`); `false` when the
/// run was recorded already (by another replica's fire). The same on the sqlx
/// databases; only the connection differs.
pub(crate) async fn record_run<DB>(
    conn: &mut DB::Connection,
    sql: &RunSql,
    f: &ScheduleFire,
    run: &NewRun,
    first: &NewTask,
    now: i64,
) -> StoreResult<bool>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    bool: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    DB::QueryResult: super::row::RowsAffected,
{
    use super::row::RowsAffected as _;
    Ok(sqlx::query::<DB>(sql.run)
        .bind(&f.schedule_id)
        .bind(ms(run.fire_time))
        .bind(&first.id)
        .bind(run.triggered)
        .bind(now)
        .execute(conn)
        .await?
        .rows()
        == 1)
}

/// The task a run names, and whether this fire made it. A run recorded before
/// (`made`: `None`) names what it named. One recorded just now, once its
/// tasks were inserted (`made`: their answers, the first copy's first), names
/// its own first task; where its key was taken, the task that holds it (the
/// run is rewritten to name it) if the schedule's producer may see that task,
/// else still its own first task's id, not made. The same on the sqlx
/// databases; only the connection differs.
pub(crate) async fn run_task<DB>(
    conn: &mut DB::Connection,
    sql: &RunSql,
    f: &ScheduleFire,
    fire: i64,
    first: &NewTask,
    made: Option<&[super::Inserted]>,
) -> StoreResult<(String, bool)>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> (String,): sqlx::FromRow<'r, DB::Row>,
{
    let Some(made) = made else {
        let id: Option<(String,)> = sqlx::query_as::<DB, _>(sql.run_task)
            .bind(&f.schedule_id)
            .bind(fire)
            .fetch_optional(conn)
            .await?;
        return Ok((id.map(|(id,)| id).unwrap_or_default(), false));
    };
    let Some(r) = made.first().filter(|r| r.deduplicated) else {
        return Ok((first.id.clone(), true));
    };
    let metadata: Option<(String,)> = sqlx::query_as::<DB, _>(sql.holder)
        .bind(&r.task_id)
        .fetch_optional(&mut *conn)
        .await?;
    // The key was taken by a task the schedule's producer may not see: the
    // run keeps the id of the task it did not make.
    if !super::flow::run_may_name(first, metadata.as_ref().map(|(m,)| m.as_str())) {
        return Ok((first.id.clone(), false));
    }
    // The key was taken: the run names the task holding it.
    sqlx::query::<DB>(sql.run_holder)
        .bind(&r.task_id)
        .bind(&f.schedule_id)
        .bind(fire)
        .execute(conn)
        .await?;
    Ok((r.task_id.clone(), false))
}
