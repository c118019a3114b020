//! Row types shared by every database (integers are BIGINT, times are epoch ms).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{AttemptRecord, StoreError, TaskRecord};
use crate::domain::{AttemptOutcome, RetryPolicy, StoredState};

/// Milliseconds since the Unix epoch.
pub(crate) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub(crate) fn from_ms(v: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(v).unwrap_or(if v < 0 {
        DateTime::<Utc>::MIN_UTC
    } else {
        DateTime::<Utc>::MAX_UTC
    })
}

pub(crate) fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn to_u32(v: i64) -> u32 {
    u32::try_from(v.max(0)).unwrap_or(u32::MAX)
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct TaskRow {
    pub seq: i64,
    pub id: String,
    pub queue: String,
    pub key: Option<String>,
    pub payload: Vec<u8>,
    pub priority: i64,
    pub run_at: i64,
    pub deadline: Option<i64>,
    pub state: String,
    pub attempt: i64,
    pub max_attempts: i64,
    pub attempts_allowed: i64,
    pub initial_backoff_ms: i64,
    pub backoff_multiplier: f64,
    pub max_backoff_ms: i64,
    pub jitter: f64,
    pub metadata: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub last_error: Option<String>,
    pub checkpoint: Option<Vec<u8>>,
    pub result: Option<Vec<u8>>,
    pub leased_by: Option<String>,
    pub lease_token: Option<String>,
    /// Read by SQL only (the default heartbeat extension).
    #[allow(dead_code)]
    pub lease_duration_ms: Option<i64>,
    pub lease_expires_at: Option<i64>,
    pub fencing_token: i64,
    pub finished_at: Option<i64>,
    pub cancel_requested: bool,
    /// When the running attempt was leased, and the worker's address.
    pub leased_at: Option<i64>,
    pub leased_address: Option<String>,
    /// The schedule and fire time that made the task (migration 0006).
    pub schedule_id: Option<String>,
    pub fire_time: Option<i64>,
    /// Routing (migration 0008).
    pub target_worker: Option<String>,
    pub target_labels: Option<String>,
    pub sticky: Option<String>,
    pub sticky_timeout_ms: Option<i64>,
    pub reserved_for: Option<String>,
    pub reserved_until: Option<i64>,
    pub fanout_group: Option<String>,
    pub fanout_distinct: bool,
    /// Flow: RetryPolicy.schedule as a JSON array of ms (migration 0010).
    #[sqlx(default)]
    pub retry_schedule: Option<String>,
    /// Admission (migration 0009).
    pub concurrency_key: Option<String>,
}

/// The attempt row written when an attempt ends.
pub(crate) struct AttemptEnd<'a> {
    pub task_id: &'a str,
    pub attempt: i64,
    pub worker_id: &'a str,
    pub worker_address: &'a str,
    pub leased_at: i64,
    pub fencing_token: i64,
}

/// A row as read that becomes a store record: the task, attempt, schedule,
/// run and worker rows. `records` and `record` turn a read's rows into its answer.
pub(crate) trait IntoRecord: Sized {
    type Record;
    fn into_record(self) -> Result<Self::Record, StoreError>;
}

/// A list read's rows, as records.
pub(crate) fn records<R: IntoRecord>(rows: Vec<R>) -> Result<Vec<R::Record>, StoreError> {
    rows.into_iter().map(R::into_record).collect()
}

/// A read by id's row, if any, as its record.
pub(crate) fn record<R: IntoRecord>(row: Option<R>) -> Result<Option<R::Record>, StoreError> {
    row.map(R::into_record).transpose()
}

impl TaskRow {
    /// The running attempt of this (leased) row, to be written as it ends.
    pub fn attempt_end(&self) -> AttemptEnd<'_> {
        AttemptEnd {
            task_id: &self.id,
            attempt: self.attempt,
            worker_id: self.leased_by.as_deref().unwrap_or_default(),
            worker_address: self.leased_address.as_deref().unwrap_or_default(),
            leased_at: self.leased_at.unwrap_or(self.updated_at),
            fencing_token: self.fencing_token,
        }
    }

    /// Whether the lease `token` names is this row's, and live at `now`.
    pub fn lease_is_live(&self, token: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
        Ok(crate::domain::task::lease_is_live(
            self.stored_state()?,
            self.lease_token.as_deref(),
            self.lease_expires_at.map(from_ms),
            token,
            now,
        ))
    }

    pub fn stored_state(&self) -> Result<StoredState, StoreError> {
        StoredState::parse(&self.state)
            .ok_or_else(|| StoreError::Corrupt(format!("task {} state {:?}", self.id, self.state)))
    }

    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: to_u32(self.max_attempts),
            initial_backoff: Duration::from_millis(self.initial_backoff_ms.max(0) as u64),
            backoff_multiplier: self.backoff_multiplier,
            max_backoff: Duration::from_millis(self.max_backoff_ms.max(0) as u64),
            jitter: self.jitter,
        }
    }
}

impl IntoRecord for TaskRow {
    type Record = TaskRecord;
    fn into_record(self) -> Result<TaskRecord, StoreError> {
        let state = self.stored_state()?;
        let retry = self.retry_policy();
        let metadata = serde_json::from_str(&self.metadata)
            .map_err(|e| StoreError::Corrupt(format!("task {} metadata: {e}", self.id)))?;
        let routing = self.routing()?;
        let retry_schedule = self.retry_schedule();
        Ok(TaskRecord {
            seq: self.seq,
            id: self.id,
            queue: self.queue,
            key: self.key,
            payload: self.payload,
            priority: i32::try_from(self.priority).unwrap_or_default(),
            run_at: from_ms(self.run_at),
            deadline: self.deadline.map(from_ms),
            state,
            attempt: to_u32(self.attempt),
            max_attempts: to_u32(self.max_attempts),
            attempts_allowed: to_u32(self.attempts_allowed),
            retry,
            metadata,
            created_at: from_ms(self.created_at),
            updated_at: from_ms(self.updated_at),
            last_error: self.last_error,
            checkpoint: self.checkpoint,
            result: self.result,
            leased_by: self.leased_by,
            lease_token: self.lease_token,
            lease_expires_at: self.lease_expires_at.map(from_ms),
            fencing_token: self.fencing_token.max(0) as u64,
            finished_at: self.finished_at.map(from_ms),
            cancel_requested: self.cancel_requested,
            schedule_id: self.schedule_id,
            fire_time: self.fire_time.map(from_ms),
            routing,
            concurrency_key: self.concurrency_key,
            retry_schedule,
            dependency_results: Default::default(),
        })
    }
}

impl TaskRow {
    /// RetryPolicy.schedule (`retry_schedule`, a JSON array of ms): empty
    /// when the task has none.
    pub(crate) fn retry_schedule(&self) -> Vec<Duration> {
        let Some(json) = self.retry_schedule.as_deref() else {
            return Vec::new();
        };
        let ms: Vec<i64> = serde_json::from_str(json).unwrap_or_default();
        ms.into_iter()
            .map(|v| Duration::from_millis(v.max(0) as u64))
            .collect()
    }

    /// The routing columns (migration 0008).
    fn routing(&self) -> Result<crate::domain::routing::TaskRouting, StoreError> {
        use crate::domain::routing::{Sticky, Target, TaskRouting};
        let labels = match &self.target_labels {
            Some(json) => serde_json::from_str(json)
                .map_err(|e| StoreError::Corrupt(format!("task {} target: {e}", self.id)))?,
            None => Default::default(),
        };
        Ok(TaskRouting {
            target: Target {
                worker_id: self.target_worker.clone(),
                labels,
            },
            sticky: Sticky::parse(self.sticky.as_deref(), self.sticky_timeout_ms),
            fanout_group: self.fanout_group.clone(),
            fanout_distinct: self.fanout_distinct,
            reserved_for: self.reserved_for.clone(),
            reserved_until: self.reserved_until.map(from_ms),
        })
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct AttemptRow {
    pub attempt: i64,
    pub worker_id: String,
    pub worker_address: String,
    pub leased_at: i64,
    pub finished_at: Option<i64>,
    pub outcome: String,
    pub error: Option<String>,
    pub fencing_token: i64,
}

impl IntoRecord for AttemptRow {
    type Record = AttemptRecord;
    fn into_record(self) -> Result<AttemptRecord, StoreError> {
        Ok(AttemptRecord {
            attempt: to_u32(self.attempt),
            worker_id: self.worker_id,
            worker_address: self.worker_address,
            leased_at: from_ms(self.leased_at),
            finished_at: self.finished_at.map(from_ms),
            outcome: AttemptOutcome::parse(&self.outcome).ok_or_else(|| {
                StoreError::Corrupt(format!("attempt outcome {:?}", self.outcome))
            })?,
            error: self.error,
            fencing_token: self.fencing_token.max(0) as u64,
        })
    }
}

pub(crate) use crate::domain::model::sort_lease_order;

/// The column values a failed attempt writes, shared by Fail and the reaper.
pub(crate) struct FailureWrite {
    pub state: crate::domain::StoredState,
    pub run_at: i64,
    pub finished_at: Option<i64>,
}

impl FailureWrite {
    /// DEAD now, where it stands (a task past its deadline).
    pub fn dead(row: &TaskRow, now: i64) -> Self {
        FailureWrite {
            state: StoredState::Dead,
            run_at: row.run_at,
            finished_at: Some(now),
        }
    }

    pub fn new(row: &TaskRow, decision: crate::domain::FailureDecision, now: i64) -> Self {
        let state = decision.stored_state();
        FailureWrite {
            state,
            run_at: decision.run_at().map(ms).unwrap_or(row.run_at),
            finished_at: state.is_finished().then_some(now),
        }
    }
}

/// What an expired lease records as the attempt's error: an at-most-once task
/// (one attempt, never retried) says why it is not run again.
pub(crate) fn expiry_error(row: &TaskRow) -> &'static str {
    let m: std::collections::BTreeMap<String, String> =
        serde_json::from_str(&row.metadata).unwrap_or_default();
    if crate::domain::task::is_at_most_once(&m) {
        "lease expired: an at-most-once task is never run again"
    } else {
        "lease expired"
    }
}

/// Applies the retry policy to the failed attempt of `row`.
pub(crate) fn decide(
    row: &TaskRow,
    non_retryable: bool,
    retry_after: Option<Duration>,
    now: DateTime<Utc>,
    unit: f64,
) -> crate::domain::FailureDecision {
    // Flow: an explicit retry schedule replaces the exponential backoff.
    let retry_after = retry_after.or_else(|| {
        crate::domain::retry::scheduled_backoff(
            &row.retry_schedule(),
            to_u32(row.attempt),
            row.jitter,
            unit,
        )
    });
    crate::domain::retry::decide_failure(
        &row.retry_policy(),
        &crate::domain::retry::Failure {
            attempt: to_u32(row.attempt),
            attempts_allowed: to_u32(row.attempts_allowed),
            non_retryable,
            cancel_requested: row.cancel_requested,
            retry_after,
        },
        now,
        unit,
    )
}

/// Which stored states a visible-state filter selects, as SQL over `state` and `run_at`
/// (`now_ph` is the placeholder bound to now).
pub(crate) fn state_filter_sql(
    states: &[crate::domain::TaskState],
    now_ph: &str,
) -> Option<String> {
    use crate::domain::TaskState as S;
    if states.is_empty() {
        return None;
    }
    let parts: Vec<String> = states
        .iter()
        .map(|s| match s {
            S::Scheduled => format!("(state = 'pending' AND run_at > {now_ph})"),
            S::Ready => format!("(state = 'pending' AND run_at <= {now_ph})"),
            S::Leased => "state = 'leased'".to_string(),
            S::Succeeded => "state = 'succeeded'".to_string(),
            S::Dead => "state = 'dead'".to_string(),
            S::Cancelled => "state = 'cancelled'".to_string(),
            S::Blocked => "state = 'blocked'".to_string(),
        })
        .collect();
    Some(format!("({})", parts.join(" OR ")))
}

/// Folds `(queue, state, later, count, min_run_at)` and `(queue, outcome, count)` rows
/// into per-queue stats, sorted by queue name.
pub(crate) fn fold_stats(
    counts: Vec<(String, String, bool, i64, i64)>,
    recent: Vec<(String, String, i64)>,
) -> Vec<super::QueueStatsRecord> {
    use std::collections::BTreeMap;
    let mut by_queue: BTreeMap<String, super::QueueStatsRecord> = BTreeMap::new();
    let entry = |m: &mut BTreeMap<String, super::QueueStatsRecord>, q: &str| {
        m.entry(q.to_string())
            .or_insert_with(|| super::QueueStatsRecord {
                queue: q.to_string(),
                ..Default::default()
            })
            .clone()
    };
    for (queue, state, later, count, min_run_at) in counts {
        let mut s = entry(&mut by_queue, &queue);
        let n = count.max(0) as u64;
        match (state.as_str(), later) {
            ("pending", true) => s.scheduled += n,
            ("pending", false) => {
                s.ready += n;
                let at = from_ms(min_run_at);
                s.oldest_ready_at = Some(s.oldest_ready_at.map_or(at, |o| o.min(at)));
            }
            ("leased", _) => s.leased += n,
            ("succeeded", _) => s.succeeded += n,
            ("dead", _) => s.dead += n,
            ("cancelled", _) => s.cancelled += n,
            _ => {}
        }
        by_queue.insert(queue, s);
    }
    for (queue, outcome, count) in recent {
        let mut s = entry(&mut by_queue, &queue);
        let n = count.max(0) as u64;
        match outcome.as_str() {
            "succeeded" => s.completed_last_minute += n,
            "failed" | "lease_expired" | "deadline_exceeded" => s.failed_last_minute += n,
            _ => {}
        }
        by_queue.insert(queue, s);
    }
    by_queue.into_values().collect()
}

/// The rows a statement changed, for code generic over the sqlx databases
/// (sqlx names it on each database's own result type only).
pub(crate) trait RowsAffected {
    fn rows(&self) -> u64;
}

impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

impl RowsAffected for sqlx::mysql::MySqlQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}
