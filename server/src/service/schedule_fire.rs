//! Turning fire times into tasks: the scheduler's step for one due schedule,
//! TriggerSchedule, and the run history. Every write goes through
//! `Store::schedule_fire`, which records the run and inserts its task in one
//! transaction keyed by (schedule_id, fire_time), conditional on the version the
//! step was computed from: a fire time fires once across replicas and crashes.

use chrono::{DateTime, Utc};

use super::schedule::{Caller, calendar_of, not_found, page_size, rules_of, settle};
use super::{Broker, ServiceError};
use crate::domain::TaskState;
use crate::domain::routing::{Fanout, TaskRouting};
use crate::domain::schedule::{self as cal, Cursor, expand_key, fire_time_text};
use crate::domain::validate::{self, Invalid};
use crate::store::{
    DueSchedule, Fired, FiredRun, NewRun, NewTask, ScheduleFire, ScheduleRecord, ScheduleRunFilter,
    StoreResult,
};

/// Metadata keys every scheduled task carries, for the worker.
pub const SCHEDULE_ID_KEY: &str = "taskbroker.schedule_id";
pub const FIRE_TIME_KEY: &str = "taskbroker.fire_time";
/// Attempts of a trigger that raced the scheduler.
const TRIGGER_ATTEMPTS: usize = 5;

/// What the scheduler's step did to one schedule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FireStep {
    /// Tasks made.
    pub fired: u64,
    /// Fire times dropped by the misfire or overlap policy or max_runs.
    pub dropped: u64,
    /// Another replica (or an update) got there first: nothing written.
    pub stale: bool,
}

/// A run as the history shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunView {
    pub fire_time: DateTime<Utc>,
    pub task_id: String,
    pub triggered: bool,
    /// `None` once retention deleted the task.
    pub task_state: Option<TaskState>,
    /// The task's last error (its latest failed attempt's), if it has one.
    pub task_last_error: Option<String>,
}

pub struct RunPage {
    pub runs: Vec<RunView>,
    pub next_page_token: String,
}

/// The tasks a schedule makes for `fire_time`, created at `now`: one, or its
/// template's fan-out copies (a group named by the first copy's id). A
/// template without a bucket of its own takes `queue_bucket`, its queue's now.
pub fn scheduled_tasks(
    s: &ScheduleRecord,
    fire_time: DateTime<Utc>,
    now: DateTime<Utc>,
    queue_bucket: Option<&str>,
) -> Vec<NewTask> {
    let t = &s.template;
    let mut metadata = t.metadata.clone();
    if let Some(b) = queue_bucket {
        let key = crate::domain::bucket::BUCKET_KEY;
        metadata.entry(key.into()).or_insert_with(|| b.to_string());
    }
    metadata.insert(SCHEDULE_ID_KEY.into(), s.id.clone());
    metadata.insert(FIRE_TIME_KEY.into(), fire_time_text(fire_time));
    if let Some(producer) = &s.created_by {
        // Producers may read the tasks their schedules made.
        metadata.insert(super::PRODUCER_KEY.into(), producer.clone());
    }
    let deadline = t
        .deadline_after
        .and_then(|d| chrono::TimeDelta::from_std(d).ok())
        .and_then(|d| now.checked_add_signed(d));
    let first = NewTask {
        id: uuid::Uuid::now_v7().to_string(),
        queue: t.queue.clone(),
        key: t.key.as_deref().map(|k| expand_key(k, &s.id, fire_time)),
        payload: t.payload.clone(),
        priority: t.priority,
        run_at: now,
        deadline,
        routing: TaskRouting {
            target: t.target.clone(),
            sticky: t.sticky,
            ..TaskRouting::default()
        },
        retry: t.retry,
        metadata,
        concurrency_key: t.concurrency_key.clone(),
        checkpoint: None,
    };
    copies_of(first, t.fanout)
}

/// A task and its fan-out copies, sharing the first copy's id as their group.
fn copies_of(mut first: NewTask, fanout: Option<Fanout>) -> Vec<NewTask> {
    let Some(fo) = fanout else {
        return vec![first];
    };
    first.routing.fanout_group = Some(first.id.clone());
    first.routing.fanout_distinct = fo.distinct_workers;
    let mut out = Vec::with_capacity(fo.copies.max(1) as usize);
    for _ in 1..fo.copies {
        out.push(NewTask {
            id: uuid::Uuid::now_v7().to_string(),
            ..first.clone()
        });
    }
    out.insert(0, first);
    out
}

impl Broker {
    /// Whether a schedule's template payload still matches its queue's
    /// `payload_schema` (it did when the schedule was stored; the schema may
    /// have changed since). Fire times of one that no longer does make no
    /// task: they are dropped, and the log says why.
    fn template_payload_ok(&self, s: &ScheduleRecord, fires: usize) -> bool {
        let t = &s.template;
        match self
            .settings
            .check_payload("schedule.task.payload", &t.queue, &t.payload)
        {
            Ok(()) => true,
            Err(e) => {
                if fires > 0 {
                    tracing::warn!(schedule = %s.id, queue = %t.queue, error = %e,
                        "fire times dropped: the template payload does not match the queue's payload_schema");
                }
                false
            }
        }
    }

    fn wake_fired(&self, runs: &[FiredRun], routed: bool) {
        for r in runs.iter().filter(|r| r.inserted) {
            for _ in 0..r.copies {
                self.metrics.submitted(&r.queue);
            }
            // Every waiter for a routed task: the one that may take it is among them.
            let n = if routed { 256 } else { r.copies };
            self.dispatch.wake_n(Some(&r.queue), n);
        }
    }

    /// The scheduler's step for one due schedule at `now`.
    pub async fn fire_due(&self, due: &DueSchedule, now: DateTime<Utc>) -> StoreResult<FireStep> {
        let s = &due.schedule;
        let mut f = ScheduleFire {
            schedule_id: s.id.clone(),
            version: s.version,
            runs: Vec::new(),
            cancel_task_id: None,
            next_spec_at: None,
            buffered_at: None,
            next_fire_at: None,
            state_reason: None,
            now,
        };
        let mut step = FireStep::default();
        match calendar_of(s) {
            Ok(calendar) => {
                let cur = Cursor {
                    next_spec_at: s.next_spec_at,
                    buffered_at: s.buffered_at,
                    runs: s.runs,
                };
                let p = cal::plan(&calendar, &rules_of(s), &cur, due.previous_unfinished, now);
                let bucket = self.queue_bucket(&s.template.queue);
                let payload_ok = self.template_payload_ok(s, p.fires.len());
                f.runs = p
                    .fires
                    .iter()
                    .filter(|_| payload_ok)
                    .map(|&t| NewRun {
                        fire_time: t,
                        tasks: scheduled_tasks(s, t, now, bucket.as_deref()),
                        triggered: false,
                    })
                    .collect();
                f.cancel_task_id = s
                    .last_task_id
                    .clone()
                    .filter(|_| p.cancel_previous && payload_ok);
                f.next_spec_at = p.next_spec_at;
                f.buffered_at = p.buffered_at;
                f.next_fire_at = p.next_fire_at;
                f.state_reason = p.completed.map(str::to_string);
                step.dropped = p.dropped + if payload_ok { 0 } else { p.fires.len() as u64 };
            }
            Err(e) => {
                // Stored before a zone or parser change made it invalid: stop it, say why.
                tracing::warn!(schedule = %s.id, error = %e, "schedule spec no longer valid");
                f.state_reason = Some(format!("invalid spec: {e}"));
            }
        }
        match self.store.schedule_fire(&f).await? {
            Fired::Stale => step.stale = true,
            Fired::Done(runs) => {
                step.fired = runs
                    .iter()
                    .filter(|r| r.inserted)
                    .map(|r| r.copies as u64)
                    .sum();
                self.wake_fired(&runs, is_routed(&s.template));
            }
        }
        Ok(step)
    }

    /// Fires a schedule once now, outside its spec (also when paused or completed).
    pub async fn trigger_schedule(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<RunView, ServiceError> {
        for _ in 0..TRIGGER_ATTEMPTS {
            let mut s = self.get_schedule(caller, id).await?;
            self.settings.check_payload(
                "schedule.task.payload",
                &s.template.queue,
                &s.template.payload,
            )?;
            let now = self.clock.now();
            let bucket = self.queue_bucket(&s.template.queue);
            let tasks = scheduled_tasks(&s, now, now, bucket.as_deref());
            s.runs += 1;
            let calendar = calendar_of(&s)?;
            settle(&mut s, &calendar, now);
            let f = ScheduleFire {
                schedule_id: s.id.clone(),
                version: s.version,
                runs: vec![NewRun {
                    fire_time: now,
                    tasks,
                    triggered: true,
                }],
                cancel_task_id: None,
                next_spec_at: s.next_spec_at,
                buffered_at: s.buffered_at,
                next_fire_at: s.next_fire_at,
                state_reason: s.state_reason.clone(),
                now,
            };
            if let Fired::Done(runs) = self.store.schedule_fire(&f).await? {
                self.wake_fired(&runs, is_routed(&s.template));
                let run = runs.into_iter().next().ok_or_else(|| not_found(id))?;
                // A key taken: the run names the task holding it, in its own state.
                let (task_state, task_last_error) = if run.inserted {
                    (Some(TaskState::Ready), None)
                } else {
                    match self.store.task_get(&run.task_id).await? {
                        Some(t) => (Some(TaskState::of(t.state, t.run_at, now)), t.last_error),
                        None => (None, None),
                    }
                };
                return Ok(RunView {
                    fire_time: run.fire_time,
                    task_id: run.task_id,
                    triggered: true,
                    task_state,
                    task_last_error,
                });
            }
        }
        Err(ServiceError::Unavailable(
            crate::store::StoreError::Internal(format!("schedule {id} kept changing").into()),
        ))
    }

    /// The run history of a schedule, newest first.
    pub async fn list_schedule_runs(
        &self,
        caller: &Caller,
        id: &str,
        size: i32,
        token: &str,
    ) -> Result<RunPage, ServiceError> {
        let size = page_size(size)?;
        let before = if token.is_empty() {
            None
        } else {
            let bad = || Invalid::new("page_token", "is not a token from a previous response");
            let ms: i64 = token
                .strip_prefix("r1:")
                .and_then(|t| t.parse().ok())
                .ok_or_else(bad)?;
            Some(DateTime::from_timestamp_millis(ms).ok_or_else(bad)?)
        };
        validate::queue_name("schedule_id", id)?;
        self.get_schedule(caller, id).await?;
        let now = self.clock.now();
        let filter = ScheduleRunFilter {
            schedule_id: id.to_string(),
            before_fire_time: before,
            limit: size + 1,
        };
        let mut runs = self.store.schedule_run_list(&filter).await?;
        let mut next_page_token = String::new();
        if runs.len() > size as usize {
            runs.truncate(size as usize);
            if let Some(last) = runs.last() {
                next_page_token = format!("r1:{}", last.fire_time.timestamp_millis());
            }
        }
        Ok(RunPage {
            runs: runs
                .into_iter()
                .map(|r| RunView {
                    fire_time: r.fire_time,
                    task_id: r.task_id,
                    triggered: r.triggered,
                    task_state: r
                        .task_state
                        .map(|st| TaskState::of(st, r.task_run_at.unwrap_or(now), now)),
                    task_last_error: r.task_last_error,
                })
                .collect(),
            next_page_token,
        })
    }
}

/// Whether a template's tasks carry routing (a target, a sticky policy, copies).
fn is_routed(t: &crate::store::TaskTemplate) -> bool {
    !t.target.is_empty() || t.sticky.is_some() || t.fanout.is_some()
}
