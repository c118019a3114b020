//! ExplainTask: why a task waits. The service reads the task, its queue's
//! live settings and usage, its dependencies and routing, and the pure rules
//! (`domain::explain`) name the gates that hold it.

use chrono::{DateTime, Utc};

use super::{Broker, ServiceError};
use crate::domain::StoredState;
use crate::domain::explain::{self, ExplainView, Gate};

/// Flow: ExplainTask names at most this many unfinished dependencies.
const EXPLAIN_DEPENDENCIES: u32 = 100;

/// ExplainTask's answer.
#[derive(Debug, Clone)]
pub struct Explained {
    pub task_id: String,
    pub state: crate::domain::TaskState,
    pub gates: Vec<Gate>,
    /// The rules the lease that takes it applies; `None` when it is not waiting.
    pub lease_path: Option<explain::LeasePath>,
}

impl Broker {
    /// Routing for Explain: the reservation that holds a retry, and
    /// the target no live worker of the queue (seen within `worker_ttl`) matches.
    #[allow(clippy::type_complexity)]
    async fn routing_gates(
        &self,
        task: &crate::store::TaskRecord,
        now: DateTime<Utc>,
    ) -> Result<(Option<(String, Option<DateTime<Utc>>)>, Option<String>), ServiceError> {
        let r = &task.routing;
        let reserved = r
            .reserved_for
            .clone()
            .filter(|_| r.reserved_until.is_none_or(|u| u > now))
            .map(|w| (w, r.reserved_until));
        if r.target.is_empty() {
            return Ok((reserved, None));
        }
        let ttl = chrono::Duration::from_std(self.settings.worker_ttl)
            .unwrap_or_else(|_| chrono::Duration::days(1));
        let matched = match &r.target.worker_id {
            // The one worker it names: live, leasing from the queue, with the labels.
            Some(id) => self.store.worker_get(id, now).await?.is_some_and(|(w, _)| {
                w.last_seen >= now - ttl
                    && w.queues.contains(&task.queue)
                    && r.target
                        .labels
                        .iter()
                        .all(|(k, v)| w.labels.get(k) == Some(v))
            }),
            None => !self
                .store
                .worker_list(&crate::store::WorkerFilter {
                    seen_since: now - ttl,
                    queue: Some(task.queue.clone()),
                    labels: r.target.labels.clone(),
                    after_id: None,
                    limit: 1,
                    now,
                })
                .await?
                .is_empty(),
        };
        let target = || {
            let labels: Vec<String> = r
                .target
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            match (&r.target.worker_id, labels.is_empty()) {
                (Some(id), true) => format!("worker {id}"),
                (Some(id), false) => format!("worker {id} with labels {}", labels.join(",")),
                (None, _) => format!("labelled {}", labels.join(",")),
            }
        };
        Ok((reserved, (!matched).then(target)))
    }

    /// Every gate that holds a task (empty when it is leased or finished).
    pub async fn explain_task(&self, task_id: &str) -> Result<Explained, ServiceError> {
        let task = self.get_task(task_id).await?;
        let now = self.clock.now();
        let state = crate::domain::TaskState::of(task.state, task.run_at, now);
        // Flow: a BLOCKED task names the dependencies it waits for.
        let blocked = match task.state {
            StoredState::Pending => None,
            StoredState::Blocked => {
                let waiting = self
                    .store
                    .task_deps_unfinished(&task.id, EXPLAIN_DEPENDENCIES)
                    .await?;
                let missing = self
                    .store
                    .task_keys_missing(&task.id, EXPLAIN_DEPENDENCIES)
                    .await?;
                Some(explain::dependency_gate(waiting, missing))
            }
            _ => {
                return Ok(Explained {
                    task_id: task.id,
                    state,
                    gates: Vec::new(),
                    lease_path: None,
                });
            }
        };
        let usage = self
            .store
            .queue_usage(&task.queue, task.concurrency_key.as_deref(), now)
            .await?;
        let ahead = if task.run_at <= now && blocked.is_none() {
            self.store
                .task_ahead(&task, usage.config.aging_ms(), now)
                .await?
        } else {
            0
        };
        let (reserved, unmatched_target) = self.routing_gates(&task, now).await?;
        let (bucket, key_cooldown_until) = self.limit_explain(&task, now).await?;
        let view = ExplainView {
            queue: task.queue.clone(),
            key: task.concurrency_key.clone(),
            run_at: task.run_at,
            attempt: task.attempt,
            config: usage.config,
            leased: usage.leased,
            key_holders: usage.key_holders,
            tokens: usage.tokens,
            key_tokens: usage.key_tokens,
            ahead,
            reserved,
            unmatched_target,
            bucket,
            key_cooldown_until,
        };
        let mut gates = explain::explain(&view, now);
        if let Some(g) = blocked {
            // What else holds it once unblocked; NONE and WAITING_BEHIND do not apply.
            gates.retain(|g| {
                !matches!(
                    g.kind,
                    explain::GateKind::None | explain::GateKind::WaitingBehind
                )
            });
            gates.insert(0, g);
        }
        // The lease decides the same way (`Broker::lease`): gates by the
        // queue's live settings, routing by the task.
        let gated = self.settings.gated(std::slice::from_ref(&task.queue));
        let lease_path = Some(explain::lease_path(&task.routing, gated));
        Ok(Explained {
            task_id: task.id,
            state,
            gates,
            lease_path,
        })
    }
}
