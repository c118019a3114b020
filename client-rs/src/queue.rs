//! Admission on `Client`: live queue settings (get, list, update by field
//! mask) and `explain_task`, why a task is not running.

use std::time::Duration;

use crate::pb::{self, Fairness};
use crate::time::to_proto_duration;
use crate::{Client, Error};

/// The changes `Client::update_queue` makes to a queue; only the fields set here
/// are sent in the update mask. Zero (or `None`) sets a field back to the
/// broker's default (no limit, no aging, ...).
#[derive(Debug, Clone)]
pub struct QueueUpdate {
    name: String,
    config: pb::QueueConfig,
    paths: Vec<String>,
}

impl QueueUpdate {
    pub fn new(name: impl Into<String>) -> Self {
        QueueUpdate {
            name: name.into(),
            config: pb::QueueConfig::default(),
            paths: Vec::new(),
        }
    }

    fn set(mut self, path: &str, f: impl FnOnce(&mut pb::QueueConfig)) -> Self {
        f(&mut self.config);
        if !self.paths.iter().any(|p| p == path) {
            self.paths.push(path.to_string());
        }
        self
    }

    /// No new leases while paused; leases held run on.
    pub fn paused(self, paused: bool) -> Self {
        self.set("paused", |c| c.paused = paused)
    }

    /// Leases held at once in the cluster; 0 = no limit.
    pub fn max_concurrent(self, n: u32) -> Self {
        self.set("max_concurrent", |c| c.max_concurrent = n)
    }

    /// Leases per second in the cluster (burst 0: one second's worth); `None` = no limit.
    pub fn rate_limit(self, per_second: Option<f64>, burst: u32) -> Self {
        self.set("rate_limit", |c| {
            c.rate_limit = per_second.map(|per_second| pb::RateLimit { per_second, burst })
        })
    }

    /// Leases held at once per concurrency key; 0 = no limit.
    pub fn max_concurrent_per_key(self, n: u32) -> Self {
        self.set("max_concurrent_per_key", |c| c.max_concurrent_per_key = n)
    }

    /// Leases per second per concurrency key; `None` = no limit.
    pub fn per_key_rate_limit(self, per_second: Option<f64>, burst: u32) -> Self {
        self.set("per_key_rate_limit", |c| {
            c.per_key_rate_limit = per_second.map(|per_second| pb::RateLimit { per_second, burst })
        })
    }

    pub fn fairness(self, f: Fairness) -> Self {
        self.set("fairness", |c| c.fairness = f as i32)
    }

    /// Each such wait adds 1 to a READY task's effective priority; `None` = off.
    pub fn priority_aging(self, every: Option<Duration>) -> Self {
        self.set("priority_aging", |c| {
            c.priority_aging = every.map(to_proto_duration)
        })
    }

    /// Leases one worker holds at once from this queue; 0 = no limit.
    pub fn max_leases_per_worker(self, n: u32) -> Self {
        self.set("max_leases_per_worker", |c| c.max_leases_per_worker = n)
    }

    /// Attempts in all of tasks that set none; 0 = the broker's default.
    pub fn max_attempts(self, n: u32) -> Self {
        self.set("default_retry.max_attempts", |c| {
            c.default_retry
                .get_or_insert_with(Default::default)
                .max_attempts = n
        })
    }

    pub fn default_lease(self, d: Option<Duration>) -> Self {
        self.set("default_lease", |c| {
            c.default_lease = d.map(to_proto_duration)
        })
    }

    pub fn min_lease(self, d: Option<Duration>) -> Self {
        self.set("min_lease", |c| c.min_lease = d.map(to_proto_duration))
    }

    pub fn max_lease(self, d: Option<Duration>) -> Self {
        self.set("max_lease", |c| c.max_lease = d.map(to_proto_duration))
    }

    /// 0 = the broker's default.
    pub fn max_payload_bytes(self, n: u64) -> Self {
        self.set("max_payload_bytes", |c| c.max_payload_bytes = n)
    }

    /// Finished tasks are deleted this long after they finish (zero keeps them);
    /// `None` = the broker's default.
    pub fn retention(self, d: Option<Duration>) -> Self {
        self.set("retention", |c| c.retention = d.map(to_proto_duration))
    }

    /// A JSON Schema document (its text) every payload submitted to the
    /// queue must match; `None` = none (payloads are opaque bytes).
    pub fn payload_schema(self, schema: Option<String>) -> Self {
        self.set("payload_schema", |c| {
            c.payload_schema = schema.unwrap_or_default()
        })
    }

    /// Whether any field is set.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    pub(crate) fn into_proto(self) -> pb::UpdateQueueRequest {
        pb::UpdateQueueRequest {
            name: self.name,
            config: Some(self.config),
            update_mask: Some(prost_types::FieldMask { paths: self.paths }),
        }
    }
}

fn queue(q: Option<pb::Queue>) -> Result<pb::Queue, Error> {
    q.ok_or(Error::Malformed("queue"))
}

impl Client {
    /// A queue's live settings (every field at its effective value).
    pub async fn get_queue(&self, name: &str) -> Result<pb::Queue, Error> {
        let req = pb::GetQueueRequest {
            name: name.to_string(),
        };
        queue(
            self.admin_stub()
                .get_queue(self.request(req))
                .await?
                .into_inner()
                .queue,
        )
    }

    /// Every queue with stored settings or with tasks, by name.
    pub async fn list_queues(&self) -> Result<Vec<pb::Queue>, Error> {
        Ok(self
            .admin_stub()
            .list_queues(self.request(pb::ListQueuesRequest {}))
            .await?
            .into_inner()
            .queues)
    }

    /// Changes the fields set in `update`; every replica applies it within a second.
    pub async fn update_queue(&self, update: QueueUpdate) -> Result<pb::Queue, Error> {
        queue(
            self.admin_stub()
                .update_queue(self.request(update.into_proto()))
                .await?
                .into_inner()
                .queue,
        )
    }

    /// Every gate that holds a task that is not running (empty when it runs or
    /// finished; a single `GATE_KIND_NONE` when a worker asking now would get it).
    pub async fn explain_task(&self, task_id: &str) -> Result<pb::ExplainTaskResponse, Error> {
        let req = pb::ExplainTaskRequest {
            task_id: task_id.to_string(),
        };
        Ok(self
            .admin_stub()
            .explain_task(self.request(req))
            .await?
            .into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mask_names_each_field_set_once() {
        let req = QueueUpdate::new("q")
            .max_concurrent(3)
            .max_concurrent(4)
            .rate_limit(Some(5.0), 0)
            .max_attempts(2)
            .into_proto();
        let c = req.config.unwrap();
        assert_eq!(c.max_concurrent, 4);
        assert_eq!(c.default_retry.unwrap().max_attempts, 2);
        assert_eq!(
            req.update_mask.unwrap().paths,
            ["max_concurrent", "rate_limit", "default_retry.max_attempts"]
        );
    }
}
