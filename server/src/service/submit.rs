//! Submit: validate a batch all-or-nothing, apply retry defaults, insert, wake waiters.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Broker, ServiceError, combine};
use crate::domain::RetryPolicy;
use crate::domain::validate::{self, Invalid};
use crate::store::{Inserted, NewTask};

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
    /// Flow (#15): dependencies and retry schedule.
    pub flow: crate::store::FlowSpec,
}

const MAX_KEY_LEN: usize = 512;

/// The metadata entry that names the producer of a task submitted with a producer
/// token (set by the API layer, read back to enforce ownership).
pub const PRODUCER_KEY: &str = "taskbroker.producer";
const MAX_METADATA_ENTRIES: usize = 64;
const MAX_METADATA_BYTES: usize = 16 * 1024;

impl Broker {
    pub async fn submit(&self, tasks: Vec<SubmitTask>) -> Result<Vec<Inserted>, ServiceError> {
        self.submit_as(tasks, None).await
    }

    /// Submit on behalf of an authenticated producer: a key that another
    /// producer's task holds answers ALREADY_EXISTS, without that task's id.
    pub async fn submit_as(
        &self,
        tasks: Vec<SubmitTask>,
        producer: Option<&str>,
    ) -> Result<Vec<Inserted>, ServiceError> {
        let limits = &self.settings.limits;
        if tasks.is_empty() || tasks.len() > limits.max_submit_batch {
            return Err(Invalid::new(
                "tasks",
                format!("must hold 1 to {} tasks", limits.max_submit_batch),
            )
            .into());
        }
        let now = self.clock.now();
        // Flow (#15): a batch with dependencies or retry schedules has an insert of its own.
        let flows: Vec<crate::store::FlowSpec> = tasks.iter().map(|t| t.flow.clone()).collect();
        for (i, f) in flows.iter().enumerate() {
            super::flow::validate_flow(i, f, limits.max_backoff)?;
        }
        let new = tasks
            .into_iter()
            .enumerate()
            .map(|(i, t)| self.new_task(i, t, now))
            .collect::<Result<Vec<_>, Invalid>>()?;
        // (index, queue, key) of the keyed tasks, when a producer submits.
        let keyed: Vec<(usize, String, String)> = match producer {
            Some(_) => new
                .iter()
                .enumerate()
                .filter_map(|(i, t)| t.key.clone().map(|k| (i, t.queue.clone(), k)))
                .collect(),
            None => Vec::new(),
        };
        if let Some(producer) = producer {
            self.check_key_owners(&keyed, producer).await?;
        }
        let queues: Vec<String> = new.iter().map(|t| t.queue.clone()).collect();
        // Concurrent Submit calls share one insert statement and commit.
        let store = self.store.clone();
        let weight = new.len();
        let inserted = if flows.iter().any(|f| !f.is_plain()) {
            self.insert_flow(new, flows, now).await?
        } else {
            self.submits
                .call(
                    (),
                    (new, now),
                    weight,
                    move |batch: Vec<(Vec<NewTask>, _)>| {
                        let store = store.clone();
                        async move {
                            let now = batch.iter().map(|(_, now)| *now).max().unwrap_or_default();
                            let lengths: Vec<usize> = batch.iter().map(|(t, _)| t.len()).collect();
                            let all: Vec<NewTask> =
                                batch.into_iter().flat_map(|(t, _)| t).collect();
                            let inserted = store.task_insert_many(&all, now).await?;
                            combine::split(inserted, &lengths)
                        }
                    },
                )
                .await?
        };
        // A key taken by another producer between the check and the insert (a race
        // of two producers on one key) is refused the same way; the call's other
        // tasks stand, as their own keys make a retry safe.
        if let Some(producer) = producer {
            let raced: Vec<(usize, String, String)> = keyed
                .into_iter()
                .filter(|(i, _, _)| inserted.get(*i).is_some_and(|r| r.deduplicated))
                .collect();
            self.check_key_owners(&raced, producer).await?;
        }
        // Wake one waiting long-poll per new task in each queue.
        let mut new_per_queue: Vec<(&str, usize)> = Vec::new();
        for (queue, r) in queues.iter().zip(&inserted) {
            if r.deduplicated {
                continue;
            }
            self.metrics.submitted(queue);
            match new_per_queue.iter_mut().find(|(q, _)| q == queue) {
                Some((_, n)) => *n += 1,
                None => new_per_queue.push((queue, 1)),
            }
        }
        for (q, n) in new_per_queue {
            self.dispatch.wake_n(Some(q), n);
        }
        Ok(inserted)
    }

    /// Refuses keys that another producer's tasks hold.
    async fn check_key_owners(
        &self,
        keyed: &[(usize, String, String)],
        producer: &str,
    ) -> Result<(), ServiceError> {
        if keyed.is_empty() {
            return Ok(());
        }
        let keys: Vec<(String, String)> = keyed
            .iter()
            .map(|(_, q, k)| (q.clone(), k.clone()))
            .collect();
        let holders = self.store.task_find_keys(&keys).await?;
        for (i, queue, key) in keyed {
            let foreign = holders.iter().any(|h| {
                &h.queue == queue
                    && h.key.as_ref() == Some(key)
                    && h.metadata.get(PRODUCER_KEY).map(String::as_str) != Some(producer)
            });
            if foreign {
                return Err(ServiceError::AlreadyExists {
                    field: format!("tasks[{i}].key"),
                    message: format!("another producer's task holds this key in queue {queue}"),
                });
            }
        }
        Ok(())
    }

    fn new_task(&self, i: usize, t: SubmitTask, now: DateTime<Utc>) -> Result<NewTask, Invalid> {
        let f = |name: &str| format!("tasks[{i}].{name}");
        validate::queue_name(&f("queue"), &t.queue)?;
        let max_payload = self.settings.max_payload_for(&t.queue);
        validate::size(&f("payload"), t.payload.len(), max_payload)?;
        if let Some(key) = &t.key {
            validate::identifier(&f("key"), key, MAX_KEY_LEN)?;
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
        })
    }

    pub(super) fn retry_policy(
        &self,
        queue: &str,
        spec: &RetrySpec,
        f: &dyn Fn(&str) -> String,
    ) -> Result<RetryPolicy, Invalid> {
        let limits = &self.settings.limits;
        let d = self.settings.retry_for(queue);
        let max_attempts = spec.max_attempts.unwrap_or(d.max_attempts);
        if max_attempts == 0 || max_attempts > limits.max_attempts {
            return Err(Invalid::new(
                f("retry.max_attempts"),
                format!("must be between 1 and {}", limits.max_attempts),
            ));
        }
        let multiplier = spec.backoff_multiplier.unwrap_or(d.backoff_multiplier);
        if !(1.0..=100.0).contains(&multiplier) {
            return Err(Invalid::new(
                f("retry.backoff_multiplier"),
                "must be between 1 and 100",
            ));
        }
        let jitter = spec.jitter.unwrap_or(d.jitter);
        if !(0.0..=1.0).contains(&jitter) {
            return Err(Invalid::new(f("retry.jitter"), "must be between 0 and 1"));
        }
        let initial_backoff = spec.initial_backoff.unwrap_or(d.initial_backoff);
        let max_backoff = spec.max_backoff.unwrap_or(d.max_backoff);
        for (name, v) in [
            ("initial_backoff", initial_backoff),
            ("max_backoff", max_backoff),
        ] {
            validate::duration_in(
                &f(&format!("retry.{name}")),
                v,
                Duration::ZERO,
                limits.max_backoff,
            )?;
        }
        Ok(RetryPolicy {
            max_attempts,
            initial_backoff,
            backoff_multiplier: multiplier,
            max_backoff,
            jitter,
        })
    }
}
