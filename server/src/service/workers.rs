//! The worker registry (routing): every Lease and Heartbeat says who
//! the worker is; the broker records it in the store, shared by every replica,
//! at most once per [`RECORD_EVERY`] per worker unless what it says changed
//! (throttled here, in memory, so the hot path stays one map lookup), and
//! answers ListWorkers and GetWorker from the store.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::{Broker, ServiceError};
use crate::domain::routing;
use crate::domain::validate::{self, Invalid};
use crate::store::{WorkerFilter, WorkerLeaseRecord, WorkerRecord, WorkerSeen};

/// A worker's registry row is rewritten at most this often while nothing it
/// reports changes (so `last_seen` is at most this stale).
pub const RECORD_EVERY: Duration = Duration::from_secs(5);
/// Workers remembered in memory at most; beyond, the stale ones are forgotten.
const MAX_REMEMBERED: usize = 100_000;
const MAX_PAGE: u32 = 1000;
const DEFAULT_PAGE: u32 = 100;

/// What this broker last wrote for each worker, and when.
#[derive(Default)]
pub(super) struct Registry {
    last: Mutex<HashMap<String, Written>>,
}

struct Written {
    at: Instant,
    /// Labels, address and queues as last written (a change writes at once).
    said: u64,
}

fn fingerprint(w: &WorkerSeen) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    w.labels.hash(&mut h);
    w.address.hash(&mut h);
    w.queues.hash(&mut h);
    h.finish()
}

impl Registry {
    /// Whether `w` is due to be written (and, if so, notes it as written now).
    fn due(&self, w: &WorkerSeen) -> bool {
        let now = Instant::now();
        let said = fingerprint(w);
        // Held for a map lookup only, never across an await.
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(prev) = last.get(&w.worker_id)
            && now.duration_since(prev.at) < RECORD_EVERY
            && (prev.said == said || w.queues.is_empty())
        {
            return false;
        }
        if last.len() >= MAX_REMEMBERED {
            last.retain(|_, v| now.duration_since(v.at) < RECORD_EVERY);
        }
        last.insert(w.worker_id.clone(), Written { at: now, said });
        true
    }

    /// Forgets a worker whose write failed, so the next call tries again.
    fn forget(&self, worker_id: &str) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.remove(worker_id);
    }
}

/// A ListWorkers request.
#[derive(Debug, Clone, Default)]
pub struct ListWorkers {
    pub queue: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub page_size: u32,
    /// The last worker id of the previous page.
    pub page_token: Option<String>,
}

/// One page of workers.
#[derive(Debug, Clone)]
pub struct WorkerPage {
    pub workers: Vec<WorkerRecord>,
    pub next_page_token: Option<String>,
}

impl Broker {
    /// Records that a worker called (Lease: with its labels and queues;
    /// Heartbeat: `labels` None and no queues keep what the last Lease said).
    /// Throttled; a store error is logged, never the caller's problem.
    pub(super) async fn worker_seen(
        &self,
        worker_id: &str,
        labels: Option<&BTreeMap<String, String>>,
        address: &str,
        queues: &[String],
    ) {
        let seen = WorkerSeen {
            worker_id: worker_id.to_string(),
            labels: labels.cloned().unwrap_or_default(),
            address: address.to_string(),
            queues: queues.to_vec(),
            now: self.clock.now(),
        };
        if !self.workers.due(&seen) {
            return;
        }
        if let Err(e) = self.store.worker_record_seen(&[seen]).await {
            tracing::warn!(worker_id, error = %e, "cannot record the worker");
            self.workers.forget(worker_id);
        }
    }

    /// Records a Heartbeat's worker (see [`Broker::worker_seen`]).
    pub async fn worker_heartbeat(&self, worker_id: &str, address: &str) {
        if validate::identifier("worker_id", worker_id, 256).is_ok() {
            self.worker_seen(worker_id, None, address, &[]).await;
        }
    }

    /// Workers seen within `worker_ttl` by any replica, by id, paged.
    pub async fn list_workers(&self, req: ListWorkers) -> Result<WorkerPage, ServiceError> {
        if let Some(q) = &req.queue {
            validate::queue_name("queue", q)?;
        }
        routing::labels("labels", &req.labels)?;
        if req.page_size > MAX_PAGE {
            return Err(
                Invalid::new("page_size", format!("must be between 0 and {MAX_PAGE}")).into(),
            );
        }
        if let Some(t) = &req.page_token {
            validate::identifier("page_token", t, 256)?;
        }
        let limit = if req.page_size == 0 {
            DEFAULT_PAGE
        } else {
            req.page_size
        };
        let now = self.clock.now();
        let ttl = chrono::Duration::from_std(self.settings.worker_ttl)
            .unwrap_or_else(|_| chrono::Duration::days(1));
        let mut workers = self
            .store
            .worker_list(&WorkerFilter {
                seen_since: now - ttl,
                queue: req.queue,
                labels: req.labels,
                after_id: req.page_token,
                limit: limit + 1,
                now,
            })
            .await?;
        let next_page_token = if workers.len() > limit as usize {
            workers.truncate(limit as usize);
            workers.last().map(|w| w.worker_id.clone())
        } else {
            None
        };
        Ok(WorkerPage {
            workers,
            next_page_token,
        })
    }

    /// One worker with its current leases; NOT_FOUND when never seen.
    pub async fn get_worker(
        &self,
        worker_id: &str,
    ) -> Result<(WorkerRecord, Vec<WorkerLeaseRecord>), ServiceError> {
        validate::identifier("worker_id", worker_id, 256)?;
        self.store
            .worker_get(worker_id, self.clock.now())
            .await?
            .ok_or_else(|| ServiceError::not_found(worker_id))
    }
}
