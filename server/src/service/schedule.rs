//! Schedules: create, read, list, update, pause, resume, delete, preview. Firing
//! (the scheduler's step and TriggerSchedule) is in `schedule_fire`.
//!
//! Ownership: a producer (when authentication is on) sees and manages only the
//! schedules it created; others look absent. Admins manage all.

use crate::domain::bucket::BUCKET_KEY;
use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};

use super::submit::{RetrySpec, StickySpec};
use super::{Broker, ServiceError};
use crate::domain::bounds;
use crate::domain::routing::{Fanout, Sticky, Target};
use crate::domain::schedule::{
    self as cal, Calendar, Cursor, DEFAULT_CATCHUP_WINDOW, MAX_CATCHUP_WINDOW, Misfire, Overlap,
    Rules, Spec,
};
use crate::domain::validate::{self, Invalid};
use crate::store::{ScheduleFilter, ScheduleRecord, TaskTemplate};

/// Who calls: `producer` is set for an authenticated producer.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    pub producer: Option<String>,
}

/// A spec as the request gives it.
#[derive(Debug, Clone)]
pub enum SpecInput {
    Cron {
        expr: String,
        timezone: String,
    },
    Every {
        every: Duration,
        anchor: Option<DateTime<Utc>>,
    },
    Once {
        at: DateTime<Utc>,
    },
}

/// The task template as the request gives it.
#[derive(Debug, Clone, Default)]
pub struct TemplateInput {
    pub queue: String,
    pub payload: Vec<u8>,
    pub priority: i32,
    pub retry: RetrySpec,
    pub metadata: BTreeMap<String, String>,
    pub deadline_after: Option<Duration>,
    /// As a submitted task's: routing, fan-out copies per fire, admission.
    pub target: Target,
    pub sticky: Option<StickySpec>,
    pub fanout: Option<Fanout>,
    pub concurrency_key: Option<String>,
    /// A key template (`{fire_time}`, `{schedule_id}`).
    pub key: Option<String>,
    /// As a submitted task's limit bucket (kept in the template's metadata).
    pub bucket: Option<String>,
}

/// A schedule as the request gives it (Create, and Update with its mask).
#[derive(Debug, Clone)]
pub struct ScheduleInput {
    pub schedule_id: String,
    pub spec: Option<SpecInput>,
    pub start_time: Option<DateTime<Utc>>,
    pub end_time: Option<DateTime<Utc>>,
    pub task: Option<TemplateInput>,
    pub overlap: Overlap,
    pub misfire: Misfire,
    pub catchup_window: Option<Duration>,
    pub paused: bool,
    pub max_runs: u32,
}

pub struct SchedulePage {
    pub schedules: Vec<ScheduleRecord>,
    pub next_page_token: String,
}

/// Fields UpdateSchedule can change.
const UPDATABLE: &[&str] = &[
    "spec",
    "start_time",
    "end_time",
    "task",
    "overlap",
    "misfire",
    "catchup_window",
    "max_runs",
    "paused",
];
/// Attempts of an update that raced a fire before giving up (UNAVAILABLE).
const WRITE_ATTEMPTS: usize = 5;

fn prefixed(prefix: &str) -> impl Fn(Invalid) -> Invalid + '_ {
    move |e| Invalid {
        field: format!("{prefix}{}", e.field),
        ..e
    }
}

pub(super) fn not_found(id: &str) -> ServiceError {
    ServiceError::NotFound {
        what: "schedule",
        id: id.to_string(),
    }
}

/// Resolves a spec (an `every` without anchor is anchored at `now`).
pub fn spec_of(input: &SpecInput, now: DateTime<Utc>) -> Spec {
    match input.clone() {
        SpecInput::Cron { expr, timezone } => Spec::Cron { expr, timezone },
        SpecInput::Every { every, anchor } => Spec::Every {
            every,
            anchor: anchor.unwrap_or(now),
        },
        SpecInput::Once { at } => Spec::Once { at },
    }
}

pub(super) fn rules_of(s: &ScheduleRecord) -> Rules {
    let t = &s.template;
    let bytes = t.queue.len()
        + t.payload.len()
        + t.key.as_ref().map_or(0, String::len)
        + t.metadata
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>();
    Rules {
        overlap: s.overlap,
        misfire: s.misfire,
        catchup_window: s.catchup_window,
        max_runs: s.max_runs,
        max_fires: cal::fires_per_pass(t.fanout.map_or(1, |f| f.copies), bytes as u64),
    }
}

pub(super) fn calendar_of(s: &ScheduleRecord) -> Result<Calendar, Invalid> {
    Calendar::new(&s.spec, s.start_time, s.end_time)
}

/// Sets the cursor from `next_spec_at` on: wake-up time and completion.
pub(super) fn settle(s: &mut ScheduleRecord, cal: &Calendar, now: DateTime<Utc>) {
    let cur = Cursor {
        next_spec_at: s.next_spec_at,
        buffered_at: s.buffered_at,
        runs: s.runs,
    };
    let p = cal::settle(cal, &rules_of(s), &cur, now);
    s.next_spec_at = p.next_spec_at;
    s.buffered_at = p.buffered_at;
    s.next_fire_at = p.next_fire_at;
    s.state_reason = p.completed.map(str::to_string);
}

fn encode_token(id: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("s1:{id}"))
}

fn decode_token(token: &str) -> Result<Option<String>, Invalid> {
    if token.is_empty() {
        return Ok(None);
    }
    let bad = || Invalid::new("page_token", "is not a token from a previous response");
    let raw = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad())?;
    let text = String::from_utf8(raw).map_err(|_| bad())?;
    text.strip_prefix("s1:")
        .map(|s| Some(s.to_string()))
        .ok_or_else(bad)
}

pub(super) fn page_size(size: i32) -> Result<u32, Invalid> {
    match size {
        0 => Ok(100),
        n if (1..=1000).contains(&n) => Ok(n as u32),
        _ => Err(Invalid::new("page_size", "must be between 0 and 1000")),
    }
}

impl Broker {
    fn template(&self, id: &str, t: TemplateInput) -> Result<TaskTemplate, Invalid> {
        let f = |name: &str| format!("schedule.task.{name}");
        validate::queue_name(&f("queue"), &t.queue)?;
        validate::size(
            &f("payload"),
            t.payload.len(),
            self.settings.max_payload_for(&t.queue),
        )?;
        self.settings
            .check_payload(&f("payload"), &t.queue, &t.payload)?;
        if t.metadata.len() > 64
            || t.metadata
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
                > 16 * 1024
        {
            return Err(Invalid::too_large(
                f("metadata"),
                "is limited to 64 entries and 16384 bytes",
            ));
        }
        if let Some(d) = t.deadline_after {
            validate::duration_in(
                &f("deadline_after"),
                d,
                Duration::from_secs(1),
                Duration::from_secs(366 * 24 * 3600),
            )?;
        }
        let retry = self.retry_policy(&t.queue, &t.retry, &f)?;
        t.target.validate(&f("target"))?;
        let sticky = match t.sticky {
            None => None,
            Some(StickySpec::Hard) => Some(Sticky::Hard),
            Some(StickySpec::Soft { timeout }) => Some(Sticky::soft(&f("sticky"), timeout)?),
        };
        if let Some(key) = &t.concurrency_key {
            crate::domain::admission::concurrency_key(&f("concurrency_key"), key)?;
        }
        let mut metadata = t.metadata;
        if metadata.contains_key(BUCKET_KEY) {
            return Err(Invalid::new(
                f("metadata"),
                format!("{BUCKET_KEY} is set by the broker"),
            ));
        }
        if let Some(b) = t.bucket {
            crate::domain::bucket::bucket_name(&f("bucket"), &b)?;
            metadata.insert(BUCKET_KEY.into(), b);
        }
        if let Some(key) = &t.key {
            // Checked as it expands: every fire time is as long as this one.
            cal::check_key_template(&f("key"), key)?;
            let expanded = cal::expand_key(key, id, DateTime::UNIX_EPOCH);
            validate::identifier(&f("key"), &expanded, super::flow::MAX_KEY_LEN).map_err(|e| {
                Invalid {
                    message: format!("{} once expanded ({expanded:?})", e.message),
                    ..e
                }
            })?;
        }
        if let Some(fo) = &t.fanout {
            fo.validate(&f("fanout"))?;
            if t.key.is_some() && fo.copies > 1 {
                return Err(Invalid::new(
                    f("key"),
                    "cannot be combined with fanout (each copy would need its own key)",
                ));
            }
        }
        // What one fire stores, copies counted, within what one Submit may.
        let copies = u64::from(t.fanout.map_or(1, |fo| fo.copies));
        let pairs = |m: &BTreeMap<String, String>| -> usize {
            m.iter().map(|(k, v)| k.len() + v.len()).sum()
        };
        let one = t.queue.len()
            + t.payload.len()
            + t.key.as_ref().map_or(0, String::len)
            + pairs(&metadata)
            + t.concurrency_key.as_ref().map_or(0, String::len)
            + t.target.worker_id.as_ref().map_or(0, String::len)
            + pairs(&t.target.labels);
        if copies.saturating_mul(one as u64) > bounds::MAX_STORED_BYTES {
            return Err(Invalid::too_large(
                f("fanout.copies"),
                format!(
                    "{copies} copies of {one} bytes would store more than {} bytes per fire",
                    bounds::MAX_STORED_BYTES
                ),
            ));
        }
        Ok(TaskTemplate {
            queue: t.queue,
            payload: t.payload,
            priority: t.priority,
            retry,
            metadata,
            deadline_after: t.deadline_after,
            target: t.target,
            sticky,
            fanout: t.fanout,
            concurrency_key: t.concurrency_key,
            key: t.key,
        })
    }

    /// Reads a schedule the caller may see.
    pub async fn get_schedule(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<ScheduleRecord, ServiceError> {
        validate::queue_name("schedule_id", id)?;
        let s = self
            .store
            .schedule_get(id)
            .await?
            .ok_or_else(|| not_found(id))?;
        match &caller.producer {
            Some(p) if s.created_by.as_deref() != Some(p.as_str()) => Err(not_found(id)),
            _ => Ok(s),
        }
    }

    pub async fn create_schedule(
        &self,
        caller: &Caller,
        input: ScheduleInput,
    ) -> Result<ScheduleRecord, ServiceError> {
        let now = self.clock.now();
        validate::queue_name("schedule.schedule_id", &input.schedule_id)?;
        let spec = input
            .spec
            .as_ref()
            .ok_or_else(|| Invalid::new("schedule.spec", "is required"))?;
        let spec = spec_of(spec, now);
        let calendar = Calendar::new(&spec, input.start_time, input.end_time)
            .map_err(prefixed("schedule."))?;
        let task = input
            .task
            .ok_or_else(|| Invalid::new("schedule.task", "is required"))?;
        let template = self.template(&input.schedule_id, task)?;
        self.template_bucket_noted(&template).await?;
        let catchup_window = catchup(input.catchup_window)?;
        let mut s = ScheduleRecord {
            id: input.schedule_id,
            spec,
            start_time: input.start_time,
            end_time: input.end_time,
            template,
            overlap: input.overlap,
            misfire: input.misfire,
            catchup_window,
            paused: input.paused,
            max_runs: input.max_runs,
            next_spec_at: cal::first_fire(&calendar, now),
            buffered_at: None,
            next_fire_at: None,
            last_fire_at: None,
            last_task_id: None,
            runs: 0,
            state_reason: None,
            created_by: caller.producer.clone(),
            created_at: now,
            updated_at: now,
            version: 0,
        };
        settle(&mut s, &calendar, now);
        if !self.store.schedule_insert(&s).await? {
            return Err(ServiceError::AlreadyExists {
                field: "schedule.schedule_id".into(),
                message: format!("schedule {} already exists", s.id),
            });
        }
        Ok(s)
    }

    pub async fn list_schedules(
        &self,
        caller: &Caller,
        size: i32,
        token: &str,
    ) -> Result<SchedulePage, ServiceError> {
        let size = page_size(size)?;
        let filter = ScheduleFilter {
            created_by: caller.producer.clone(),
            after_id: decode_token(token)?,
            limit: size + 1,
        };
        let mut schedules = self.store.schedule_list(&filter).await?;
        let mut next_page_token = String::new();
        if schedules.len() > size as usize {
            schedules.truncate(size as usize);
            next_page_token = schedules
                .last()
                .map(|s| encode_token(&s.id))
                .unwrap_or_default();
        }
        Ok(SchedulePage {
            schedules,
            next_page_token,
        })
    }

    /// Reads, changes and writes a schedule, again if a fire raced the write.
    async fn change_schedule(
        &self,
        caller: &Caller,
        id: &str,
        change: impl Fn(&mut ScheduleRecord, DateTime<Utc>) -> Result<(), ServiceError>,
    ) -> Result<ScheduleRecord, ServiceError> {
        for _ in 0..WRITE_ATTEMPTS {
            let mut s = self.get_schedule(caller, id).await?;
            let now = self.clock.now();
            change(&mut s, now)?;
            if self.store.schedule_update(&s, now).await? {
                s.version += 1;
                s.updated_at = now;
                return Ok(s);
            }
        }
        Err(ServiceError::Unavailable(
            crate::store::StoreError::Internal(format!("schedule {id} kept changing").into()),
        ))
    }

    pub async fn update_schedule(
        &self,
        caller: &Caller,
        input: ScheduleInput,
        paths: Vec<String>,
    ) -> Result<ScheduleRecord, ServiceError> {
        validate::queue_name("schedule.schedule_id", &input.schedule_id)?;
        if paths.is_empty() {
            return Err(Invalid::new("update_mask", "must name at least one field").into());
        }
        if let Some(p) = paths.iter().find(|p| !UPDATABLE.contains(&p.as_str())) {
            return Err(Invalid::new(
                "update_mask",
                format!("{p:?} cannot be updated ({} can)", UPDATABLE.join(", ")),
            )
            .into());
        }
        let has = |name: &str| paths.iter().any(|p| p == name);
        let template = match (&input.task, has("task")) {
            (Some(t), true) => {
                let template = self.template(&input.schedule_id, t.clone())?;
                self.template_bucket_noted(&template).await?;
                Some(template)
            }
            (None, true) => return Err(Invalid::new("schedule.task", "is required").into()),
            _ => None,
        };
        if has("spec") && input.spec.is_none() {
            return Err(Invalid::new("schedule.spec", "is required").into());
        }
        let catchup_window = catchup(input.catchup_window)?;
        let id = input.schedule_id.clone();
        self.change_schedule(caller, &id, |s, now| {
            let was_paused = s.paused;
            let mut recalc = false;
            if has("spec") {
                if let Some(spec) = &input.spec {
                    s.spec = spec_of(spec, now);
                }
                recalc = true;
            }
            if has("start_time") {
                s.start_time = input.start_time;
                recalc = true;
            }
            if has("end_time") {
                s.end_time = input.end_time;
                recalc = true;
            }
            if let Some(t) = &template {
                s.template = t.clone();
            }
            if has("overlap") {
                s.overlap = input.overlap;
            }
            if has("misfire") {
                s.misfire = input.misfire;
            }
            if has("catchup_window") {
                s.catchup_window = catchup_window;
            }
            if has("max_runs") {
                s.max_runs = input.max_runs;
                recalc = true;
            }
            if has("paused") {
                s.paused = input.paused;
            }
            let calendar = calendar_of(s).map_err(prefixed("schedule."))?;
            if recalc {
                s.next_spec_at = restart_from(s, &calendar, now);
            } else if was_paused && !s.paused && s.state_reason.is_none() && !calendar.is_once() {
                // Unpausing through the mask is a resume: what passed while paused is skipped.
                s.next_spec_at = calendar.first_at_or_after(now);
            }
            settle(s, &calendar, now);
            Ok(())
        })
        .await
    }

    pub async fn pause_schedule(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<ScheduleRecord, ServiceError> {
        self.change_schedule(caller, id, |s, _| {
            s.paused = true;
            Ok(())
        })
        .await
    }

    /// Resumes; fire times passed while paused are skipped (a one-off still fires).
    pub async fn resume_schedule(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<ScheduleRecord, ServiceError> {
        self.change_schedule(caller, id, |s, now| {
            if !s.paused {
                return Ok(());
            }
            s.paused = false;
            let calendar = calendar_of(s).map_err(prefixed("schedule."))?;
            if s.state_reason.is_none() && !calendar.is_once() {
                s.next_spec_at = calendar.first_at_or_after(now);
            }
            settle(s, &calendar, now);
            Ok(())
        })
        .await
    }

    pub async fn delete_schedule(&self, caller: &Caller, id: &str) -> Result<(), ServiceError> {
        self.get_schedule(caller, id).await?;
        if !self.store.schedule_delete(id).await? {
            return Err(not_found(id));
        }
        Ok(())
    }

    /// Up to `count` fire times of a spec after `after` (default now).
    pub fn preview_schedule(
        &self,
        spec: Option<SpecInput>,
        start: Option<DateTime<Utc>>,
        end: Option<DateTime<Utc>>,
        after: Option<DateTime<Utc>>,
        count: i32,
    ) -> Result<Vec<DateTime<Utc>>, ServiceError> {
        let now = self.clock.now();
        let spec = spec.ok_or_else(|| Invalid::new("spec", "is required"))?;
        let count = match count {
            0 => 10,
            n if (1..=1000).contains(&n) => n as usize,
            _ => return Err(Invalid::new("count", "must be between 0 and 1000").into()),
        };
        let calendar = Calendar::new(&spec_of(&spec, now), start, end)?;
        let after = after.unwrap_or(now);
        // A one-off in the past shows nothing: it would fire at once.
        Ok(calendar.preview(after, count))
    }
}

/// The next spec fire time after a definition change: from now on; a one-off
/// keeps its time unless it already fired.
fn restart_from(
    s: &ScheduleRecord,
    calendar: &Calendar,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    match cal::first_fire(calendar, now) {
        Some(t) if calendar.is_once() && s.last_fire_at.is_some_and(|l| l >= t) => None,
        other => other,
    }
}

fn catchup(window: Option<Duration>) -> Result<Duration, Invalid> {
    let w = window.unwrap_or(DEFAULT_CATCHUP_WINDOW);
    validate::duration_in(
        "schedule.catchup_window",
        w,
        Duration::from_secs(1),
        MAX_CATCHUP_WINDOW,
    )?;
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_tokens_round_trip_and_reject_garbage() {
        assert_eq!(
            decode_token(&encode_token("a:b")).unwrap().as_deref(),
            Some("a:b")
        );
        assert_eq!(decode_token("").unwrap(), None);
        assert!(decode_token("!!").is_err());
    }
}
