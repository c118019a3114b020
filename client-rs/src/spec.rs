//! `TaskSpec`: a builder for the task a producer submits. Unset fields take the
//! broker's defaults (priority 0, run now, no deadline, the broker's retry policy).

use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::Error;
use crate::pb;
use crate::time::{to_proto_duration, to_proto_timestamp};

/// A task to submit.
///
/// ```
/// use std::time::Duration;
/// use taskbroker_client::TaskSpec;
///
/// let spec = TaskSpec::new("emails", b"hello".to_vec())
///     .key("order-42")
///     .priority(5)
///     .run_in(Duration::from_secs(10))
///     .max_attempts(5)
///     .initial_backoff(Duration::from_secs(1));
/// assert_eq!(spec.queue(), "emails");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    inner: pb::TaskSpec,
}

impl TaskSpec {
    /// A task for `queue` carrying `payload` (opaque to the broker; 1 MiB by default).
    pub fn new(queue: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        TaskSpec {
            inner: pb::TaskSpec {
                queue: queue.into(),
                payload: payload.into(),
                ..Default::default()
            },
        }
    }

    /// A task whose payload is the JSON of `value`; read it back with `TaskContext::json`.
    pub fn json<T: Serialize + ?Sized>(queue: impl Into<String>, value: &T) -> Result<Self, Error> {
        let payload = serde_json::to_vec(value).map_err(Error::Encode)?;
        Ok(TaskSpec::new(queue, payload))
    }

    /// The idempotency key: while a task with this key exists in the queue, submitting
    /// another one returns the existing task (`deduplicated`).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.inner.key = key.into();
        self
    }

    /// Tasks of a queue with the same concurrency key count together against the
    /// queue's per-key limits (`[A-Za-z0-9._:@/-]{1,256}`).
    pub fn concurrency_key(mut self, key: impl Into<String>) -> Self {
        self.inner.concurrency_key = key.into();
        self
    }

    /// The limit bucket the task counts against, in every queue
    /// (`[A-Za-z0-9._:-]{1,128}`); unset: its queue's bucket, if any.
    pub fn bucket(mut self, bucket: impl Into<String>) -> Self {
        self.inner.bucket = bucket.into();
        self
    }

    /// The checkpoint the first attempt starts from (`TaskContext::last_checkpoint`),
    /// as if an earlier attempt had saved it; the worker's own checkpoints
    /// replace it. Limited in size as a checkpoint is (1 MiB by default).
    pub fn checkpoint(mut self, checkpoint: impl Into<Vec<u8>>) -> Self {
        self.inner.checkpoint = Some(checkpoint.into());
        self
    }

    /// Higher priorities are leased first. Default 0.
    pub fn priority(mut self, priority: i32) -> Self {
        self.inner.priority = priority;
        self
    }

    /// Not leased before `at`.
    pub fn run_at(mut self, at: impl Into<SystemTime>) -> Self {
        self.inner.run_at = Some(to_proto_timestamp(at.into()));
        self
    }

    /// Not leased before `delay` from now (this machine's clock).
    pub fn run_in(self, delay: Duration) -> Self {
        self.run_at(SystemTime::now() + delay)
    }

    /// The task must finish by `at`, or it goes DEAD with `DEADLINE_EXCEEDED`.
    pub fn deadline(mut self, at: impl Into<SystemTime>) -> Self {
        self.inner.deadline = Some(to_proto_timestamp(at.into()));
        self
    }

    /// The task must finish within `within` from now.
    pub fn deadline_in(self, within: Duration) -> Self {
        self.deadline(SystemTime::now() + within)
    }

    /// Attempts in all, counting the first. Default: the broker's (3).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.retry().max_attempts = n;
        self
    }

    /// Backoff before the second attempt; zero retries at once. Default: the broker's (10 s).
    pub fn initial_backoff(mut self, d: Duration) -> Self {
        self.retry().initial_backoff = Some(to_proto_duration(d));
        self
    }

    /// Growth of the backoff after each failure, at least 1. Default: the broker's (2).
    pub fn backoff_multiplier(mut self, factor: f64) -> Self {
        self.retry().backoff_multiplier = factor;
        self
    }

    /// Longest backoff. Default: the broker's (1 h).
    pub fn max_backoff(mut self, d: Duration) -> Self {
        self.retry().max_backoff = Some(to_proto_duration(d));
        self
    }

    /// Random spread of each backoff, 0 to 1 (0.2 means +/-20%). Default: the broker's (0.2).
    pub fn jitter(mut self, spread: f64) -> Self {
        self.retry().jitter = Some(spread);
        self
    }

    /// A free-form metadata entry (for example `traceparent`).
    pub fn metadata(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.inner.metadata.insert(name.into(), value.into());
        self
    }

    /// Only the worker with this id may lease the task (routing). No such
    /// worker is not an error: the task waits.
    pub fn target_worker(mut self, worker_id: impl Into<String>) -> Self {
        self.target().worker_id = worker_id.into();
        self
    }

    /// Only a worker carrying this label may lease the task; call again to
    /// require more (a worker must carry all of them).
    pub fn target_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.target().labels.insert(key.into(), value.into());
        self
    }

    /// Keeps a retry for the worker that ran the failed attempt.
    pub fn sticky(mut self, sticky: crate::Sticky) -> Self {
        self.inner.sticky = Some(sticky.into());
        self
    }

    /// Makes `copies` tasks (1 to 1000) sharing a fan-out group; with
    /// `distinct_workers` no worker runs two of them. `Submitted::copy_task_ids`
    /// lists them.
    pub fn fanout(mut self, copies: u32, distinct_workers: bool) -> Self {
        self.inner.fanout = Some(pb::Fanout {
            copies,
            distinct_workers,
        });
        self
    }

    /// Flow: keeps the task BLOCKED until the task with this id SUCCEEDED; call
    /// again for more. When one ends DEAD or CANCELLED this task is CANCELLED (reason
    /// DEPENDENCY_FAILED) unless [`TaskSpec::run_if_dependency_fails`].
    pub fn depends_on(mut self, task_id: impl Into<String>) -> Self {
        self.inner.depends_on.push(task_id.into());
        self
    }

    /// Flow: as [`TaskSpec::depends_on`], naming an earlier task of the same
    /// [`Client::submit_many`](crate::Client::submit_many) by its index.
    pub fn depends_on_index(mut self, index: u32) -> Self {
        self.inner.depends_on_index.push(index);
        self
    }

    /// Flow: runs even when a dependency ends DEAD or CANCELLED (it then counts
    /// as finished).
    pub fn run_if_dependency_fails(mut self) -> Self {
        self.inner.run_if_dependency_fails = true;
        self
    }

    /// Flow: as [`TaskSpec::depends_on`], naming the task by its queue and key;
    /// it may be submitted later (the task waits BLOCKED until it exists and
    /// SUCCEEDED, or until its own deadline).
    pub fn depends_on_key(mut self, queue: impl Into<String>, key: impl Into<String>) -> Self {
        self.inner.depends_on_keys.push(pb::TaskKey {
            queue: queue.into(),
            key: key.into(),
        });
        self
    }

    /// Explicit delays before each retry (the last one repeats), instead of the
    /// exponential backoff; at most 32.
    pub fn retry_schedule(mut self, delays: impl IntoIterator<Item = Duration>) -> Self {
        let retry = self.inner.retry.get_or_insert_with(Default::default);
        retry.schedule = delays.into_iter().map(to_proto_duration).collect();
        self
    }

    /// Leased at most once: if the lease expires or the attempt fails, the task
    /// goes DEAD and never runs again.
    pub fn at_most_once(mut self) -> Self {
        self.inner.at_most_once = true;
        self
    }

    /// When a task with this key still waits, replace its payload, run_at,
    /// priority and metadata with this one's (`Submitted::replaced`) instead of
    /// keeping it as it is.
    pub fn replace_waiting(mut self) -> Self {
        self.inner.on_duplicate_key = pb::DuplicateKeyPolicy::ReplaceWaiting as i32;
        self
    }

    pub fn queue(&self) -> &str {
        &self.inner.queue
    }

    pub fn payload(&self) -> &[u8] {
        &self.inner.payload
    }

    /// The message sent on the wire.
    pub fn into_proto(self) -> pb::TaskSpec {
        self.inner
    }

    fn retry(&mut self) -> &mut pb::RetryPolicy {
        self.inner.retry.get_or_insert_with(Default::default)
    }

    fn target(&mut self) -> &mut pb::Target {
        self.inner.target.get_or_insert_with(Default::default)
    }
}

impl From<TaskSpec> for pb::TaskSpec {
    fn from(spec: TaskSpec) -> Self {
        spec.inner
    }
}

impl From<pb::TaskSpec> for TaskSpec {
    fn from(inner: pb::TaskSpec) -> Self {
        TaskSpec { inner }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_fills_only_what_is_set() {
        let plain = TaskSpec::new("q", "p").into_proto();
        assert!(plain.retry.is_none() && plain.run_at.is_none() && plain.deadline.is_none());

        let spec = TaskSpec::new("q", "p")
            .key("k")
            .priority(-2)
            .max_attempts(5)
            .initial_backoff(Duration::ZERO)
            .jitter(0.0)
            .metadata("traceparent", "00-abc")
            .into_proto();
        assert_eq!(spec.key, "k");
        assert_eq!(spec.priority, -2);
        let retry = spec.retry.unwrap();
        assert_eq!(retry.max_attempts, 5);
        assert_eq!(
            retry.initial_backoff,
            Some(prost_types::Duration::default())
        );
        assert_eq!(retry.jitter, Some(0.0));
        assert_eq!(
            retry.backoff_multiplier, 0.0,
            "unset stays the broker's default"
        );
        assert_eq!(spec.metadata["traceparent"], "00-abc");
    }

    #[test]
    fn dependency_builders_fill_the_flow_fields() {
        let spec = TaskSpec::new("q", "p")
            .depends_on("a")
            .depends_on("b")
            .depends_on_index(0)
            .run_if_dependency_fails()
            .into_proto();
        assert_eq!(spec.depends_on, ["a", "b"]);
        assert_eq!(spec.depends_on_index, [0]);
        assert!(spec.run_if_dependency_fails);
    }

    #[test]
    fn json_payloads_are_serialized() {
        let spec = TaskSpec::json("q", &serde_json::json!({"to": "a@b.c"})).unwrap();
        assert_eq!(spec.payload(), br#"{"to":"a@b.c"}"#);
    }
}
