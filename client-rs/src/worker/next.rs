//! lease_next: a slot whose task settles asks for its next task in the
//! same call (Complete or Fail with `lease_next`, max_tasks 1, no wait) and runs
//! what comes back in the same slot; when nothing comes back, the slot is freed
//! and the lease loop's long-poll Lease takes over. Never while the worker stops:
//! a task leased then would not be run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::context::Shared;
use super::event::WorkerEvent;
use super::handler::BoxHandler;
use crate::{Client, pb};

/// What an attempt needs to ask for, and start, the task after it.
#[derive(Clone)]
pub(crate) struct Chain {
    pub(crate) handlers: Arc<HashMap<String, BoxHandler>>,
    /// The runtime's Lease for one slot, without a wait.
    pub(crate) lease: pb::LeaseRequest,
    pub(crate) lease_duration: std::time::Duration,
    /// Cancelled when leasing stops (shutdown asked for).
    pub(crate) stopping: CancellationToken,
    pub(crate) client: Client,
    pub(crate) events: broadcast::Sender<WorkerEvent>,
}

impl Chain {
    /// The `lease_next` for a settle, unless the worker is stopping.
    pub(crate) fn lease_next(&self) -> Option<pb::LeaseRequest> {
        (!self.stopping.is_cancelled()).then(|| self.lease.clone())
    }

    /// Prepares `task` to run: its handler and its shared state (valid until
    /// `sent_at` + the lease duration), announced as Started. `None` when no handler
    /// serves its queue (the lease runs out and the broker retries it).
    pub(crate) fn begin(
        &self,
        task: pb::LeasedTask,
        sent_at: Instant,
    ) -> Option<(Arc<Shared>, BoxHandler)> {
        let Some(handler) = self.handlers.get(&task.queue).cloned() else {
            // Only the handlers' queues are leased, so this cannot happen.
            tracing::error!(task_id = %task.task_id, queue = %task.queue, "no handler for the queue");
            return None;
        };
        let _ = self.events.send(WorkerEvent::Started {
            task_id: task.task_id.clone(),
            queue: task.queue.clone(),
            attempt: task.attempt,
        });
        let shared = Arc::new(Shared::new(
            task,
            self.client.clone(),
            sent_at + self.lease_duration,
            self.lease_duration,
        ));
        Some((shared, handler))
    }
}

/// The task a settle leased for this slot, kept until the attempt is over.
#[derive(Default)]
pub(crate) struct Next {
    task: Mutex<Option<(pb::LeasedTask, Instant)>>,
}

impl Next {
    /// Keeps the first task of `tasks` (the broker answers at most max_tasks = 1).
    pub(crate) fn keep(&self, tasks: Vec<pb::LeasedTask>, sent_at: Instant) {
        let mut slot = self.task.lock().unwrap_or_else(|e| e.into_inner());
        for t in tasks {
            if slot.is_none() {
                *slot = Some((t, sent_at));
            } else {
                // More than one slot's worth: left to expire rather than overrun
                // the slots (the broker never answers more than asked for).
                tracing::error!(task_id = %t.task_id, "the broker returned more tasks than asked for");
            }
        }
    }

    pub(crate) fn take(&self) -> Option<(pb::LeasedTask, Instant)> {
        self.task.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}
