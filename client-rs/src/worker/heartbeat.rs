//! The running leases of a worker and the loop that keeps them alive: one Heartbeat
//! call per interval names every live lease, and its answer cancels the handlers
//! whose lease was lost or whose task an operator cancelled.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::context::{CancelReason, Shared};
use super::event::{LeaseUpdate, WorkerEvent};
use crate::time::{from_proto_timestamp, to_proto_duration};
use crate::{Client, pb};

/// The broker's limit on leases per Heartbeat call.
const MAX_BATCH: usize = 1000;

/// The leases whose handlers are running (or whose outcome is being reported).
#[derive(Default)]
pub(crate) struct Leases {
    // Held only to insert, remove or copy out entries, never across an await.
    map: Mutex<HashMap<String, Arc<Shared>>>,
}

impl Leases {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Shared>>> {
        // The map stays consistent even if a holder panicked: every change is one
        // insert or remove.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn insert(&self, shared: Arc<Shared>) {
        self.map().insert(shared.task.task_id.clone(), shared);
    }

    pub(crate) fn remove(&self, task_id: &str) {
        self.map().remove(task_id);
    }

    /// The leases still worth extending.
    fn live(&self) -> Vec<Arc<Shared>> {
        self.map()
            .values()
            .filter(|s| !s.is_lost())
            .cloned()
            .collect()
    }

    /// Fires `cancelled()` of every running handler.
    pub(crate) fn cancel_all(&self, reason: CancelReason) {
        for shared in self.map().values() {
            shared.cancel(reason);
        }
    }
}

/// Heartbeat settings of one worker.
pub(crate) struct Heartbeat {
    pub(crate) client: Client,
    pub(crate) worker_id: String,
    pub(crate) leases: Arc<Leases>,
    pub(crate) every: Duration,
    pub(crate) extend_by: Duration,
    pub(crate) events: broadcast::Sender<WorkerEvent>,
}

impl Heartbeat {
    /// Beats every `every` until `stop` fires. A failed call is logged and the next
    /// tick tries again: the leases outlive a few missed beats (a third of a lease each).
    pub(crate) async fn run(self, stop: CancellationToken) {
        let mut tick = tokio::time::interval_at(Instant::now() + self.every, self.every);
        // After a slow call, wait a full interval rather than beat in a burst.
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let live = self.leases.live();
            for batch in live.chunks(MAX_BATCH) {
                // A stop does not wait for a beat the broker does not answer.
                tokio::select! {
                    biased;
                    _ = stop.cancelled() => return,
                    _ = self.beat(batch) => {}
                }
            }
        }
    }

    async fn beat(&self, batch: &[Arc<Shared>]) {
        let req = pb::HeartbeatRequest {
            worker_id: self.worker_id.clone(),
            leases: batch
                .iter()
                .map(|s| pb::LeaseRef {
                    task_id: s.task.task_id.clone(),
                    lease_token: s.task.lease_token.clone(),
                })
                .collect(),
            extend_by: Some(to_proto_duration(self.extend_by)),
        };
        let sent_at = Instant::now();
        let statuses = match self.client.heartbeat(req).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, leases = batch.len(), "heartbeat failed; retrying next interval");
                return;
            }
        };
        let mut updates = Vec::with_capacity(batch.len());
        for (shared, status) in batch.iter().zip(statuses) {
            if status.lost {
                shared.lose("the broker's heartbeat answer says so");
            } else {
                shared.extended(sent_at + self.extend_by);
                shared.expires_at_is(from_proto_timestamp(status.lease_expires_at.as_ref()));
                if status.cancel_requested {
                    shared.cancel(CancelReason::CancelRequested);
                }
            }
            updates.push(LeaseUpdate {
                task_id: status.task_id,
                lost: status.lost,
                cancel_requested: status.cancel_requested,
                lease_expires_at: from_proto_timestamp(status.lease_expires_at.as_ref()),
            });
        }
        let _ = self.events.send(WorkerEvent::Heartbeat { leases: updates });
    }
}
