//! Routing on `Client`: the worker registry (ListWorkers, GetWorker)
//! and [`Sticky`], the retry policy of [`crate::TaskSpec::sticky`].

use std::time::Duration;

use crate::pb;
use crate::{Client, Error};

/// Keeps a failed task's retry for the worker that ran the failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sticky {
    /// Reserved for that worker until the timeout passes; then any worker.
    Soft(Duration),
    /// Reserved for that worker until the task's deadline.
    Hard,
}

impl From<Sticky> for pb::StickyPolicy {
    fn from(sticky: Sticky) -> Self {
        match sticky {
            Sticky::Soft(timeout) => pb::StickyPolicy {
                strategy: pb::StickyStrategy::Soft as i32,
                timeout: Some(crate::time::to_proto_duration(timeout)),
            },
            Sticky::Hard => pb::StickyPolicy {
                strategy: pb::StickyStrategy::Hard as i32,
                timeout: None,
            },
        }
    }
}

/// Which workers `Client::list_workers_page` returns; empty means every worker
/// seen within the broker's `worker_ttl`.
#[derive(Debug, Clone, Default)]
pub struct WorkerFilter {
    inner: pb::ListWorkersRequest,
}

impl WorkerFilter {
    pub fn new() -> Self {
        WorkerFilter::default()
    }

    /// Only workers whose last Lease named this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.inner.queue = queue.into();
        self
    }

    /// Only workers carrying this label; call again to require more.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.inner.labels.insert(key.into(), value.into());
        self
    }

    /// Workers per page, 1 to 1000 (default 100).
    pub fn page_size(mut self, n: i32) -> Self {
        self.inner.page_size = n;
        self
    }
}

impl Client {
    /// One page of workers, by worker id, and the token of the next page (empty
    /// on the last page).
    pub async fn list_workers_page(
        &self,
        filter: &WorkerFilter,
        page_token: &str,
    ) -> Result<(Vec<pb::Worker>, String), Error> {
        let mut req = filter.inner.clone();
        req.page_token = page_token.to_string();
        let r = self
            .admin_stub()
            .list_workers(self.request(req))
            .await?
            .into_inner();
        Ok((r.workers, r.next_page_token))
    }

    /// Every worker matching `filter` (all pages).
    pub async fn list_workers(&self, filter: &WorkerFilter) -> Result<Vec<pb::Worker>, Error> {
        let mut all = Vec::new();
        let mut token = String::new();
        loop {
            let (page, next) = self.list_workers_page(filter, &token).await?;
            all.extend(page);
            if next.is_empty() {
                return Ok(all);
            }
            token = next;
        }
    }

    /// One worker and the leases it holds now.
    pub async fn get_worker(
        &self,
        worker_id: &str,
    ) -> Result<(pb::Worker, Vec<pb::WorkerLease>), Error> {
        let req = pb::GetWorkerRequest {
            worker_id: worker_id.to_string(),
        };
        let r = self
            .admin_stub()
            .get_worker(self.request(req))
            .await?
            .into_inner();
        Ok((r.worker.ok_or(Error::Malformed("worker"))?, r.leases))
    }
}
