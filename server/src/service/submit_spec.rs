//! A submitted spec becomes the rows the store inserts: validation of every
//! field, the broker's and the queue's defaults, and fan-out copies.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::Broker;
use super::flow::MAX_KEY_LEN;
use crate::domain::bucket::{BUCKET_KEY, bucket_name};
use crate::domain::routing::{Fanout, Sticky, Target, TaskRouting};
use crate::domain::task::{AT_MOST_ONCE_KEY, DEPENDENCIES_KEY};
use crate::domain::validate::{self, Invalid};
use crate::store::NewTask;

/// Retry fields as submitted; `None` takes the broker default.
#[derive(Debug, Clone, Default)]
pub struct RetrySpec {
    pub max_attempts: Option<u32>,
    pub initial_backoff: Option<Duration>,
    pub backoff_multiplier: Option<f64>,
    pub max_backoff: Option<Duration>,
    pub jitter: Option<f64>,
}

/// One task as submitted.
#[derive(Debug, Clone, Default)]
pub struct SubmitTask {
    pub queue: String,
    pub payload: Vec<u8>,
    pub key: Option<String>,
    pub priority: i32,
    pub run_at: Option<DateTime<Utc>>,
    pub deadline: Option<DateTime<Utc>>,
    pub retry: RetrySpec,
    pub metadata: BTreeMap<String, String>,
    /// Routing: who may lease it, sticky retries, fan-out copies.
    pub target: Target,
    pub sticky: Option<StickySpec>,
    pub fanout: Option<Fanout>,
    /// Flow: dependencies and retry schedule.
    pub flow: crate::store::FlowSpec,
    /// Admission: `[A-Za-z0-9._:@/-]{1,256}`, or none.
    pub concurrency_key: Option<String>,
    /// Leased at most once: one attempt, never retried (not after a lost lease either).
    pub at_most_once: bool,
    /// What to do when the key is taken.
    pub on_duplicate: DuplicateKey,
    /// The limit bucket it counts against (`[A-Za-z0-9._:-]{1,128}`); none:
    /// its queue's, if the queue names one.
    pub bucket: Option<String>,
    /// The checkpoint the first attempt's lease hands over, as if an earlier
    /// attempt had saved it (at most `limits.max_checkpoint_bytes`); none: no
    /// checkpoint. A worker's Checkpoint replaces it.
    pub checkpoint: Option<Vec<u8>>,
}

/// What Submit does when a task with the same (queue, key) exists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DuplicateKey {
    /// Keep the existing task (deduplicated).
    #[default]
    KeepExisting,
    /// Replace the payload, run_at, priority and metadata of the existing task
    /// while it waits (not leased, not finished); otherwise keep it.
    ReplaceWaiting,
}

/// A sticky policy as submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StickySpec {
    Soft { timeout: Option<Duration> },
    Hard,
}

const MAX_METADATA_ENTRIES: usize = 64;
const MAX_METADATA_BYTES: usize = 16 * 1024;

/// What one copy of a spec stores (the bytes counted against
/// [`bounds::MAX_STORED_BYTES`]).
pub(super) fn stored_bytes(t: &SubmitTask, f: &crate::store::FlowSpec) -> u64 {
    let pairs =
        |m: &BTreeMap<String, String>| -> usize { m.iter().map(|(k, v)| k.len() + v.len()).sum() };
    let n = t.queue.len()
        + t.payload.len()
        + t.key.as_ref().map_or(0, String::len)
        + pairs(&t.metadata)
        + t.concurrency_key.as_ref().map_or(0, String::len)
        + t.checkpoint.as_ref().map_or(0, Vec::len)
        + t.target.worker_id.as_ref().map_or(0, String::len)
        + pairs(&t.target.labels)
        + f.depends_on.iter().map(String::len).sum::<usize>()
        + f.depends_on_keys
            .iter()
            .map(|k| k.queue.len() + k.key.len())
            .sum::<usize>();
    n as u64
}

impl Broker {
    /// A spec's tasks: itself, or its fan-out copies sharing the first copy's id
    /// as their group.
    pub(super) fn new_copies(
        &self,
        i: usize,
        mut t: SubmitTask,
        now: DateTime<Utc>,
    ) -> Result<Vec<NewTask>, Invalid> {
        let f = |name: &str| format!("tasks[{i}].{name}");
        t.target.validate(&f("target"))?;
        let sticky = match t.sticky {
            None => None,
            Some(StickySpec::Hard) => Some(Sticky::Hard),
            Some(StickySpec::Soft { timeout }) => Some(Sticky::soft(&f("sticky"), timeout)?),
        };
        if t.on_duplicate == DuplicateKey::ReplaceWaiting && t.key.is_none() {
            return Err(Invalid::new(
                f("on_duplicate_key"),
                "REPLACE_WAITING needs a key (it replaces the task holding that key)",
            ));
        }
        let fanout = t.fanout.take();
        if let Some(fo) = &fanout {
            fo.validate(&f("fanout"))?;
            if t.key.is_some() && fo.copies > 1 {
                return Err(Invalid::new(
                    f("key"),
                    "cannot be combined with fanout (each copy would need its own key)",
                ));
            }
        }
        let routing = TaskRouting {
            target: std::mem::take(&mut t.target),
            sticky,
            ..TaskRouting::default()
        };
        let mut first = self.new_task(i, t, now)?;
        first.routing = routing;
        let Some(fo) = fanout else {
            return Ok(vec![first]);
        };
        first.routing.fanout_group = Some(first.id.clone());
        first.routing.fanout_distinct = fo.distinct_workers;
        let mut out = Vec::with_capacity(fo.copies as usize);
        for _ in 1..fo.copies {
            out.push(NewTask {
                id: uuid::Uuid::now_v7().to_string(),
                ..first.clone()
            });
        }
        out.insert(0, first);
        Ok(out)
    }

    pub(super) fn new_task(
        &self,
        i: usize,
        mut t: SubmitTask,
        now: DateTime<Utc>,
    ) -> Result<NewTask, Invalid> {
        let f = |name: &str| format!("tasks[{i}].{name}");
        if t.metadata.contains_key(AT_MOST_ONCE_KEY) {
            return Err(Invalid::new(
                f("metadata"),
                format!("{AT_MOST_ONCE_KEY} is set by the broker: use at_most_once"),
            ));
        }
        if t.metadata.contains_key(BUCKET_KEY) {
            return Err(Invalid::new(
                f("metadata"),
                format!("{BUCKET_KEY} is set by the broker: use bucket"),
            ));
        }
        if let Some(b) = &t.bucket {
            bucket_name(&f("bucket"), b)?;
        }
        if t.metadata.contains_key(DEPENDENCIES_KEY) {
            return Err(Invalid::new(
                f("metadata"),
                format!("{DEPENDENCIES_KEY} is set by the broker"),
            ));
        }
        if t.at_most_once {
            if t.retry.max_attempts.is_some_and(|m| m != 1) {
                return Err(Invalid::new(
                    f("retry.max_attempts"),
                    "must be 1 or unset with at_most_once",
                ));
            }
            t.retry.max_attempts = Some(1);
        }
        validate::queue_name(&f("queue"), &t.queue)?;
        let max_payload = self.settings.max_payload_for(&t.queue);
        validate::size(&f("payload"), t.payload.len(), max_payload)?;
        if let Some(c) = &t.checkpoint {
            let max = self.settings.limits.max_checkpoint_bytes;
            validate::size(&f("checkpoint"), c.len(), max)?;
        }
        self.settings
            .check_payload(&f("payload"), &t.queue, &t.payload)?;
        if let Some(key) = &t.key {
            validate::identifier(&f("key"), key, MAX_KEY_LEN)?;
        }
        if let Some(key) = &t.concurrency_key {
            crate::domain::admission::concurrency_key(&f("concurrency_key"), key)?;
        }
        let metadata_bytes: usize = t.metadata.iter().map(|(k, v)| k.len() + v.len()).sum();
        if t.metadata.len() > MAX_METADATA_ENTRIES || metadata_bytes > MAX_METADATA_BYTES {
            return Err(Invalid::too_large(
                f("metadata"),
                format!(
                    "is limited to {MAX_METADATA_ENTRIES} entries and {MAX_METADATA_BYTES} bytes"
                ),
            ));
        }
        let run_at = t.run_at.unwrap_or(now);
        if let Some(deadline) = t.deadline {
            if deadline <= now {
                return Err(Invalid::new(f("deadline"), "is in the past"));
            }
            if deadline <= run_at {
                return Err(Invalid::new(f("deadline"), "is not after run_at"));
            }
        }
        let retry = self.retry_policy(&t.queue, &t.retry, &f)?;
        if t.at_most_once {
            // Past the metadata limits: the broker's own entry does not count.
            t.metadata.insert(AT_MOST_ONCE_KEY.into(), "true".into());
        }
        // Limit buckets: the task's own, or else its queue's (as of now).
        let bucket = t.bucket.take().or_else(|| self.queue_bucket(&t.queue));
        if let Some(b) = bucket {
            t.metadata.insert(BUCKET_KEY.into(), b);
        }
        Ok(NewTask {
            id: uuid::Uuid::now_v7().to_string(),
            queue: t.queue,
            key: t.key,
            payload: t.payload,
            priority: t.priority,
            run_at,
            deadline: t.deadline,
            retry,
            metadata: t.metadata,
            routing: TaskRouting::default(),
            concurrency_key: t.concurrency_key,
            checkpoint: t.checkpoint,
        })
    }
}
