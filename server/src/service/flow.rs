//! Flow: submit with dependencies, the flow view of tasks, task events,
//! and bulk cancel/requeue by filter.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Broker, ServiceError};
use crate::domain::TaskState;
use crate::domain::validate::{self, Invalid};
use crate::store::{
    BulkFilter, EventRecord, FlowInserted, FlowSpec, Inserted, MAX_WAITS_PER_KEY, NewTask,
    TaskFlowInfo, TaskRecord,
};

/// TaskSpec.key's length at most (a key of depends_on_keys too).
pub const MAX_KEY_LEN: usize = 512;
/// Dependencies one task may name at most.
pub const MAX_DEPENDENCIES: usize = 1000;
/// Keys one task may wait for at most (TaskSpec.depends_on_keys); they count
/// toward [`MAX_DEPENDENCIES`] too.
pub const MAX_DEPENDENCY_KEYS: usize = 64;
/// Entries of RetryPolicy.schedule at most.
pub const MAX_RETRY_SCHEDULE: usize = 32;
/// Tasks a bulk operation acts on when max_tasks is 0, and at most.
pub const BULK_DEFAULT: u32 = 1000;
pub const BULK_MAX: u32 = 100_000;
/// Matched tasks a bulk answer shows.
pub const BULK_SAMPLE: usize = 20;

/// Validates the flow fields of `tasks[i]`.
pub fn validate_flow(i: usize, f: &FlowSpec, max_backoff: Duration) -> Result<(), Invalid> {
    let field = |name: &str| format!("tasks[{i}].{name}");
    if f.depends_on_keys.len() > MAX_DEPENDENCY_KEYS {
        return Err(Invalid::new(
            field("depends_on_keys"),
            format!("names more than {MAX_DEPENDENCY_KEYS} keys"),
        ));
    }
    if f.depends_on.len() + f.depends_on_index.len() + f.depends_on_keys.len() > MAX_DEPENDENCIES {
        return Err(Invalid::new(
            field("depends_on"),
            format!("names more than {MAX_DEPENDENCIES} dependencies"),
        ));
    }
    for (j, d) in f.depends_on.iter().enumerate() {
        validate::identifier(&field(&format!("depends_on[{j}]")), d, 128)?;
    }
    for (j, k) in f.depends_on_keys.iter().enumerate() {
        validate::queue_name(&field(&format!("depends_on_keys[{j}].queue")), &k.queue)?;
        validate::identifier(
            &field(&format!("depends_on_keys[{j}].key")),
            &k.key,
            MAX_KEY_LEN,
        )?;
    }
    for (j, &k) in f.depends_on_index.iter().enumerate() {
        if k >= i {
            return Err(Invalid::new(
                field(&format!("depends_on_index[{j}]")),
                format!("{k} is not the index of an earlier task in this request"),
            ));
        }
    }
    if f.retry_schedule.len() > MAX_RETRY_SCHEDULE {
        return Err(Invalid::new(
            field("retry.schedule"),
            format!("has more than {MAX_RETRY_SCHEDULE} entries"),
        ));
    }
    for (j, d) in f.retry_schedule.iter().enumerate() {
        validate::duration_in(
            &field(&format!("retry.schedule[{j}]")),
            *d,
            Duration::ZERO,
            max_backoff,
        )?;
    }
    Ok(())
}

/// What a bulk operation matched and did.
#[derive(Debug, Clone, Default)]
pub struct BulkOutcome {
    pub matched: u64,
    pub changed: u64,
    /// Leased tasks asked to cancel (cancel only).
    pub cancel_requested: u64,
    pub sample: Vec<TaskRecord>,
    /// When the last requeued task becomes ready (requeue only).
    pub last_run_at: Option<DateTime<Utc>>,
    /// The time states were computed at.
    pub now: DateTime<Utc>,
}

impl Broker {
    /// Inserts a batch with flow (not combined with other calls: it has its own
    /// transaction); an unknown dependency is INVALID_ARGUMENT naming the field.
    pub(super) async fn insert_flow(
        &self,
        new: Vec<NewTask>,
        flows: Vec<FlowSpec>,
        now: DateTime<Utc>,
        spec_of: &[usize],
        [dep_pos, key_pos]: [&[Vec<usize>]; 2],
        commit_by: Option<std::time::Instant>,
    ) -> Result<Vec<Inserted>, ServiceError> {
        // Where the `at`-th (distinct) entry of a spec's list stood in the
        // request, for error fields.
        let in_request = |pos: &[Vec<usize>], spec: usize, at: usize| {
            pos.get(spec).and_then(|p| p.get(at)).copied().unwrap_or(at)
        };
        match self
            .store
            .task_insert_flow(&new, &flows, now, commit_by)
            .await?
        {
            FlowInserted::DeadlinePassed => Err(ServiceError::DeadlineExceeded),
            FlowInserted::Done(inserted) => Ok(inserted),
            FlowInserted::UnknownDependency { task, dep } => {
                // (`task` counts fan-out copies and `dep` skips repeated ids;
                // the field names the spec and the id as the request had them.)
                let spec = spec_of.get(task).copied().unwrap_or(task);
                let at = in_request(dep_pos, spec, dep);
                Err(Invalid::new(format!("tasks[{spec}].depends_on[{at}]"), "names no task").into())
            }
            FlowInserted::TooManyWaits { task, key } => {
                let spec = spec_of.get(task).copied().unwrap_or(task);
                let at = in_request(key_pos, spec, key);
                Err(Invalid::too_large(
                    format!("tasks[{spec}].depends_on_keys[{at}]"),
                    format!(
                        "no task holds this key yet and {MAX_WAITS_PER_KEY} tasks wait for it \
                         already, the most one key may have per producer"
                    ),
                )
                .into())
            }
        }
    }

    /// The flow side of these tasks (dependencies, cancel reason).
    pub async fn flow_info(
        &self,
        task_ids: &[String],
    ) -> Result<HashMap<String, TaskFlowInfo>, ServiceError> {
        if task_ids.is_empty() {
            return Ok(HashMap::new());
        }
        Ok(self.store.task_flow_info(task_ids).await?)
    }

    /// One task's events, oldest first, after `after_event_id`.
    pub async fn list_task_events(
        &self,
        task_id: &str,
        after_event_id: i64,
        page_size: i32,
    ) -> Result<Vec<EventRecord>, ServiceError> {
        validate::identifier("task_id", task_id, 128)?;
        let limit = match page_size {
            0 => 100,
            1..=1000 => page_size as u32,
            _ => {
                return Err(Invalid::new("page_size", "must be between 0 and 1000").into());
            }
        };
        let events = self
            .store
            .event_list(task_id, after_event_id, limit)
            .await?;
        if events.is_empty() && after_event_id == 0 && self.store.task_get(task_id).await?.is_none()
        {
            return Err(ServiceError::not_found(task_id));
        }
        Ok(events)
    }

    fn bulk_filter(&self, mut f: BulkFilter, max_tasks: u32) -> Result<BulkFilter, Invalid> {
        validate::queue_name("filter.queue", &f.queue)?;
        if max_tasks > BULK_MAX {
            return Err(Invalid::new(
                "max_tasks",
                format!("must be at most {BULK_MAX}"),
            ));
        }
        f.limit = if max_tasks == 0 {
            BULK_DEFAULT
        } else {
            max_tasks
        };
        f.now = self.clock.now();
        Ok(f)
    }

    /// Cancels the tasks a filter selects (or only counts them).
    pub async fn cancel_tasks(
        &self,
        f: BulkFilter,
        dry_run: bool,
        max_tasks: u32,
    ) -> Result<BulkOutcome, ServiceError> {
        let mut f = self.bulk_filter(f, max_tasks)?;
        if f.states.is_empty() {
            f.states = vec![
                TaskState::Scheduled,
                TaskState::Ready,
                TaskState::Blocked,
                TaskState::Leased,
            ];
        }
        let tasks = self.store.task_select(&f).await?;
        let mut out = BulkOutcome {
            matched: tasks.len() as u64,
            now: f.now,
            ..Default::default()
        };
        if !dry_run && !tasks.is_empty() {
            let ids: Vec<String> = tasks.iter().map(|t| t.id.clone()).collect();
            let done = self.store.task_cancel_many(&ids, f.now).await?;
            out.changed = done.cancelled;
            out.cancel_requested = done.cancel_requested;
        }
        out.sample = tasks.into_iter().take(BULK_SAMPLE).collect();
        Ok(out)
    }

    /// Requeues the dead or cancelled tasks a filter selects, spread out at
    /// `rate_per_second` when it is above zero.
    pub async fn requeue_tasks(
        &self,
        f: BulkFilter,
        dry_run: bool,
        max_tasks: u32,
        rate_per_second: f64,
    ) -> Result<BulkOutcome, ServiceError> {
        if !rate_per_second.is_finite() || rate_per_second < 0.0 {
            return Err(Invalid::new("rate_per_second", "must be zero or more").into());
        }
        let mut f = self.bulk_filter(f, max_tasks)?;
        if let Some(i) = f
            .states
            .iter()
            .position(|s| !matches!(s, TaskState::Dead | TaskState::Cancelled))
        {
            return Err(Invalid::new(
                format!("filter.states[{i}]"),
                "requeue takes only DEAD and CANCELLED tasks",
            )
            .into());
        }
        if f.states.is_empty() {
            f.states = vec![TaskState::Dead, TaskState::Cancelled];
        }
        let tasks = self.store.task_select(&f).await?;
        let now = f.now;
        let mut out = BulkOutcome {
            matched: tasks.len() as u64,
            now,
            ..Default::default()
        };
        let plan: Vec<(String, DateTime<Utc>)> = tasks
            .iter()
            .enumerate()
            .map(|(i, t)| (t.id.clone(), release_at(now, i, rate_per_second)))
            .collect();
        out.last_run_at = plan.last().map(|p| p.1);
        if !dry_run && !plan.is_empty() {
            out.changed = self.store.task_requeue_many(&plan, now).await?;
            let queue = f.queue.as_str();
            self.dispatch.wake_n(Some(queue), plan.len());
        }
        out.sample = tasks.into_iter().take(BULK_SAMPLE).collect();
        Ok(out)
    }
}

/// When the `i`-th task of a redrive at `rate` per second becomes ready.
pub fn release_at(now: DateTime<Utc>, i: usize, rate: f64) -> DateTime<Utc> {
    if rate <= 0.0 {
        return now;
    }
    let ms = (i as f64 * 1000.0 / rate).min(1e15) as i64;
    now + chrono::Duration::milliseconds(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redrive_is_spread_at_the_rate() {
        let now = DateTime::from_timestamp(1_000, 0).unwrap();
        assert_eq!(release_at(now, 5, 0.0), now);
        assert_eq!(release_at(now, 0, 10.0), now);
        assert_eq!(
            release_at(now, 25, 10.0),
            now + chrono::Duration::milliseconds(2500)
        );
    }

    #[test]
    fn dependency_index_must_name_an_earlier_task() {
        let f = FlowSpec {
            depends_on_index: vec![0, 2],
            ..Default::default()
        };
        let e = validate_flow(2, &f, Duration::from_secs(60)).unwrap_err();
        assert_eq!(e.field, "tasks[2].depends_on_index[1]");
        assert!(validate_flow(3, &f, Duration::from_secs(60)).is_ok());
    }
}
