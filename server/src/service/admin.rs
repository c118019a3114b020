//! Operator calls: read, list, cancel, update, requeue, attempts, stats.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};

use super::{Broker, ServiceError};
use crate::domain::validate::{self, Invalid};
use crate::domain::{StoredState, TaskState};
use crate::store::{AttemptRecord, Changed, QueueStatsRecord, TaskFilter, TaskRecord, TaskUpdate};

#[derive(Debug, Clone, Default)]
pub struct ListTasks {
    pub queue: Option<String>,
    pub states: Vec<TaskState>,
    pub key: Option<String>,
    pub worker_id: Option<String>,
    /// Only tasks whose last error is exactly this.
    pub last_error: Option<String>,
    pub created_after: Option<DateTime<Utc>>,
    pub created_before: Option<DateTime<Utc>>,
    pub schedule_id: Option<String>,
    /// Only the copies of this fan-out group (routing).
    pub fanout_group: Option<String>,
    /// Only tasks whose target names this worker.
    pub target_worker: Option<String>,
    /// Only tasks whose target labels include every pair.
    pub target_labels: std::collections::BTreeMap<String, String>,
    /// Only tasks whose metadata has this key.
    pub metadata_key: Option<String>,
    /// With `metadata_key`: only tasks whose metadata maps it to this value.
    pub metadata_value: Option<String>,
    pub page_size: i32,
    pub page_token: String,
}

pub struct TaskPage {
    pub tasks: Vec<TaskRecord>,
    pub next_page_token: String,
    /// The time the visible states were computed at.
    pub now: DateTime<Utc>,
}

#[derive(Debug, Clone, Default)]
pub struct UpdateTask {
    pub task_id: String,
    /// The field paths to change.
    pub paths: Vec<String>,
    pub run_at: Option<DateTime<Utc>>,
    pub priority: i32,
    pub deadline: Option<DateTime<Utc>>,
    pub max_attempts: u32,
    /// The new target when `paths` names "target" (empty: anyone may lease it).
    pub target: crate::domain::routing::Target,
}

/// A page of a list without creation-time filters, by sequence number alone (the
/// tokens of earlier versions; still read).
const PAGE_TOKEN_PREFIX: &str = "v1:";
/// A page of a list in creation order (a created_after/created_before filter).
const CREATED_TOKEN_PREFIX: &str = "v2:";
/// A page of a list without creation-time filters, which is in creation order
/// like every list: the creation time and the sequence number.
const NEWEST_TOKEN_PREFIX: &str = "v3:";

/// Where the next page starts: after the task with this sequence number (and
/// this creation time in epoch ms), in a list without (`Newest`) or with
/// (`Created`) creation-time filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PagePos {
    Seq(i64),
    Created(i64, i64),
    Newest(i64, i64),
}

fn encode_page_token(pos: PagePos) -> String {
    let text = match pos {
        PagePos::Seq(seq) => format!("{PAGE_TOKEN_PREFIX}{seq}"),
        PagePos::Created(at, seq) => format!("{CREATED_TOKEN_PREFIX}{at}:{seq}"),
        PagePos::Newest(at, seq) => format!("{NEWEST_TOKEN_PREFIX}{at}:{seq}"),
    };
    URL_SAFE_NO_PAD.encode(text)
}

fn decode_page_token(token: &str) -> Result<Option<PagePos>, Invalid> {
    if token.is_empty() {
        return Ok(None);
    }
    let bad = || Invalid::new("page_token", "is not a token from a previous response");
    let raw = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad())?;
    let text = String::from_utf8(raw).map_err(|_| bad())?;
    if let Some(seq) = text.strip_prefix(PAGE_TOKEN_PREFIX) {
        return seq
            .parse()
            .map(|s| Some(PagePos::Seq(s)))
            .map_err(|_| bad());
    }
    let (pos, rest): (fn(i64, i64) -> PagePos, &str) =
        if let Some(rest) = text.strip_prefix(CREATED_TOKEN_PREFIX) {
            (PagePos::Created, rest)
        } else if let Some(rest) = text.strip_prefix(NEWEST_TOKEN_PREFIX) {
            (PagePos::Newest, rest)
        } else {
            return Err(bad());
        };
    let (at, seq) = rest.split_once(':').ok_or_else(bad)?;
    match (at.parse(), seq.parse()) {
        (Ok(at), Ok(seq)) => Ok(Some(pos(at, seq))),
        _ => Err(bad()),
    }
}

fn state_name(s: StoredState) -> &'static str {
    match s {
        StoredState::Pending => "waiting to run",
        StoredState::Leased => "leased",
        StoredState::Succeeded => "succeeded",
        StoredState::Dead => "dead",
        StoredState::Cancelled => "cancelled",
        StoredState::Blocked => "waiting for its dependencies",
    }
}

impl Broker {
    fn changed(&self, c: Changed, id: &str, what: &str) -> Result<TaskRecord, ServiceError> {
        match c {
            Changed::Done(t) => Ok(*t),
            Changed::NotFound => Err(ServiceError::not_found(id)),
            Changed::WrongState(s) => Err(ServiceError::FailedPrecondition(format!(
                "cannot {what} task {id}: it is {}",
                state_name(s)
            ))),
        }
    }

    pub async fn get_task(&self, task_id: &str) -> Result<TaskRecord, ServiceError> {
        validate::identifier("task_id", task_id, 64)?;
        self.store
            .task_get(task_id)
            .await?
            .ok_or_else(|| ServiceError::not_found(task_id))
    }

    pub async fn list_tasks(&self, req: ListTasks) -> Result<TaskPage, ServiceError> {
        let size = match req.page_size {
            0 => 100,
            n if (1..=1000).contains(&n) => n as u32,
            _ => return Err(Invalid::new("page_size", "must be between 0 and 1000").into()),
        };
        if let Some(q) = &req.queue {
            validate::queue_name("queue", q)?;
        }
        if let Some(k) = &req.key {
            validate::identifier("key", k, 1024)?;
        }
        if let Some(w) = &req.worker_id {
            validate::identifier("worker_id", w, 1024)?;
        }
        if let Some(s) = &req.schedule_id {
            validate::queue_name("schedule_id", s)?;
        }
        if let Some(g) = &req.fanout_group {
            validate::identifier("fanout_group", g, 64)?;
        }
        if let Some(w) = &req.target_worker {
            validate::identifier("target_worker_id", w, 256)?;
        }
        crate::domain::routing::labels("target_labels", &req.target_labels)?;
        let metadata = match (&req.metadata_key, &req.metadata_value) {
            (None, None) => None,
            (None, Some(_)) => {
                return Err(Invalid::new("metadata_value", "needs metadata_key").into());
            }
            (Some(k), v) => {
                metadata_filter_key(k)?;
                if let Some(v) = v
                    && v.len() > 4096
                {
                    return Err(Invalid::new("metadata_value", "is longer than 4096 bytes").into());
                }
                Some((k.clone(), v.clone()))
            }
        };
        let now = self.clock.now();
        // A list with a creation-time filter is in creation order (so the page is
        // read from the creation-time index, however few tasks the range holds).
        let by_created = req.created_after.is_some() || req.created_before.is_some();
        let (before_seq, before_created) = match (decode_page_token(&req.page_token)?, by_created) {
            (None, _) => (None, None),
            (Some(PagePos::Seq(seq)), false) => (Some(seq), None),
            (Some(PagePos::Created(at, seq)), true) | (Some(PagePos::Newest(at, seq)), false) => (
                Some(seq),
                Some(DateTime::from_timestamp_millis(at).ok_or_else(|| {
                    Invalid::new("page_token", "is not a token from a previous response")
                })?),
            ),
            _ => {
                return Err(Invalid::new(
                    "page_token",
                    "is from a list with other creation-time filters",
                )
                .into());
            }
        };
        let filter = TaskFilter {
            queue: req.queue,
            states: req.states,
            key: req.key,
            worker_id: req.worker_id,
            last_error: req.last_error,
            created_after: req.created_after,
            created_before: req.created_before,
            schedule_id: req.schedule_id,
            before_seq,
            before_created,
            fanout_group: req.fanout_group,
            target_worker: req.target_worker,
            target_labels: req.target_labels,
            metadata,
            limit: size + 1,
            now,
        };
        let mut tasks = self.store.task_list(&filter).await?;
        let next_page_token = if tasks.len() > size as usize {
            tasks.truncate(size as usize);
            tasks
                .last()
                .map(|t| {
                    let at = t.created_at.timestamp_millis();
                    encode_page_token(if by_created {
                        PagePos::Created(at, t.seq)
                    } else {
                        PagePos::Newest(at, t.seq)
                    })
                })
                .unwrap_or_default()
        } else {
            String::new()
        };
        Ok(TaskPage {
            tasks,
            next_page_token,
            now,
        })
    }

    pub async fn cancel_task(&self, task_id: &str) -> Result<TaskRecord, ServiceError> {
        validate::identifier("task_id", task_id, 64)?;
        let c = self.store.task_cancel(task_id, self.clock.now()).await?;
        self.changed(c, task_id, "cancel")
    }

    pub async fn update_task(&self, req: UpdateTask) -> Result<TaskRecord, ServiceError> {
        validate::identifier("task_id", &req.task_id, 64)?;
        if req.paths.is_empty() {
            return Err(Invalid::new("update_mask", "must name at least one field").into());
        }
        let mut u = TaskUpdate::default();
        for path in &req.paths {
            match path.as_str() {
                "run_at" => u.run_at = Some(req.run_at.unwrap_or_else(|| self.clock.now())),
                "priority" => u.priority = Some(req.priority),
                "deadline" => u.deadline = Some(req.deadline),
                "max_attempts" => {
                    let max = self.settings.limits.max_attempts;
                    if req.max_attempts == 0 || req.max_attempts > max {
                        return Err(Invalid::new(
                            "max_attempts",
                            format!("must be between 1 and {max}"),
                        )
                        .into());
                    }
                    if req.max_attempts != 1 {
                        let held = self.store.task_get(&req.task_id).await?;
                        if held.is_some_and(|t| crate::domain::task::is_at_most_once(&t.metadata)) {
                            return Err(Invalid::new(
                                "max_attempts",
                                "must stay 1: the task is at most once",
                            )
                            .into());
                        }
                    }
                    u.max_attempts = Some(req.max_attempts);
                }
                "target" => {
                    req.target.validate("target")?;
                    u.target = Some(req.target.clone());
                }
                other => {
                    return Err(Invalid::new(
                        "update_mask",
                        format!(
                            "{other:?} cannot be updated (run_at, priority, deadline, max_attempts, target can)"
                        ),
                    )
                    .into());
                }
            }
        }
        let c = self
            .store
            .task_update(&req.task_id, &u, self.clock.now())
            .await?;
        let task = self.changed(c, &req.task_id, "update")?;
        if task.state == StoredState::Pending {
            self.dispatch.wake(Some(&task.queue));
        }
        Ok(task)
    }

    pub async fn requeue_task(&self, task_id: &str) -> Result<TaskRecord, ServiceError> {
        validate::identifier("task_id", task_id, 64)?;
        let c = self.store.task_requeue(task_id, self.clock.now()).await?;
        let task = self.changed(c, task_id, "requeue")?;
        self.dispatch.wake(Some(&task.queue));
        Ok(task)
    }

    pub async fn list_attempts(&self, task_id: &str) -> Result<Vec<AttemptRecord>, ServiceError> {
        validate::identifier("task_id", task_id, 64)?;
        self.store
            .attempt_list(task_id)
            .await?
            .ok_or_else(|| ServiceError::not_found(task_id))
    }

    pub async fn queue_stats(
        &self,
        queues: Vec<String>,
    ) -> Result<(Vec<QueueStatsRecord>, DateTime<Utc>), ServiceError> {
        for (i, q) in queues.iter().enumerate() {
            validate::queue_name(&format!("queues[{i}]"), q)?;
        }
        let now = self.clock.now();
        Ok((self.store.queue_stats(&queues, now).await?, now))
    }
}

/// A metadata key a list may filter by: 1 to 256 bytes, no control character, no
/// `"` or `\` (the stores read it as a JSON path label).
fn metadata_filter_key(k: &str) -> Result<(), Invalid> {
    if k.is_empty() || k.len() > 256 {
        return Err(Invalid::new("metadata_key", "must be 1 to 256 bytes"));
    }
    if k.chars().any(|c| c.is_control() || c == '"' || c == '\\') {
        return Err(Invalid::new(
            "metadata_key",
            "must not hold a control character, `\"` or `\\`",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_tokens_round_trip_and_reject_garbage() {
        for pos in [PagePos::Seq(42), PagePos::Created(1_700_000_000_123, 42)] {
            assert_eq!(
                decode_page_token(&encode_page_token(pos)).unwrap(),
                Some(pos)
            );
        }
        assert!(decode_page_token(&URL_SAFE_NO_PAD.encode("v2:1:x")).is_err());
        assert_eq!(decode_page_token("").unwrap(), None);
        assert!(decode_page_token("!!!").is_err());
        assert!(decode_page_token(&URL_SAFE_NO_PAD.encode("v2:1")).is_err());
    }
}
