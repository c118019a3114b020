//! Queues with slots of their own (a handler's `QueuePolicy::concurrency`): each runs
//! in a lease loop of its own with that many slots, the worker's other settings
//! unchanged, the other queues sharing the worker's `concurrency`. One stop drains all.

use std::future::Future;

use tokio_util::sync::CancellationToken;

use super::{Worker, WorkerBuilder};
use crate::Error;

impl Worker {
    /// The worker split by slots, or `None` when no queue has slots of its own.
    pub(super) fn split_by_slots(&self) -> Option<Vec<Worker>> {
        let c = &self.config;
        let own: Vec<(String, usize)> = c
            .queues
            .iter()
            .filter_map(|q| Some((q.clone(), c.policies.get(q)?.concurrency_limit()?)))
            .collect();
        if own.is_empty() {
            return None;
        }
        let shared: Vec<String> = c
            .queues
            .iter()
            .filter(|q| !own.iter().any(|(o, _)| o == *q))
            .cloned()
            .collect();
        let mut groups: Vec<(Vec<String>, usize)> =
            own.into_iter().map(|(q, n)| (vec![q], n)).collect();
        if !shared.is_empty() {
            groups.push((shared, c.concurrency));
        }
        Some(
            groups
                .into_iter()
                .map(|(queues, slots)| Worker {
                    config: self.part(queues, slots),
                    worker_id: self.worker_id.clone(),
                    events: self.events.clone(),
                })
                .collect(),
        )
    }

    fn part(&self, queues: Vec<String>, slots: usize) -> WorkerBuilder {
        let c = &self.config;
        WorkerBuilder {
            client: c.client.clone(),
            handlers: queues
                .iter()
                .filter_map(|q| Some((q.clone(), c.handlers.get(q)?.clone())))
                .collect(),
            // Without their slots, so a part does not split again.
            policies: queues
                .iter()
                .filter_map(|q| {
                    let mut p = c.policies.get(q)?.clone();
                    p.drop_concurrency();
                    Some((q.clone(), p))
                })
                .collect(),
            queues,
            concurrency: slots,
            lease_duration: c.lease_duration,
            heartbeat_interval: c.heartbeat_interval,
            lease_wait: c.lease_wait,
            shutdown_grace: c.shutdown_grace,
            worker_id: c.worker_id.clone(),
            labels: c.labels.clone(),
            middleware: c.middleware.clone(),
            meter: c.meter.clone(),
            fail_fast: c.fail_fast,
        }
    }
}

/// Runs `parts` until `shutdown` (or until one of them stops with an error, which
/// stops the others); the first error is returned.
pub(super) async fn run_parts(
    parts: Vec<Worker>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    let stop = CancellationToken::new();
    let runs = parts.into_iter().map(|w| {
        let stop = stop.clone();
        async move {
            let until = stop.clone();
            let r = w.run_one(async move { until.cancelled().await }).await;
            if r.is_err() {
                stop.cancel();
            }
            r
        }
    });
    let watch = async {
        tokio::select! {
            _ = shutdown => stop.cancel(),
            _ = stop.cancelled() => {}
        }
    };
    let (results, ()) = tokio::join!(futures::future::join_all(runs), watch);
    results
        .into_iter()
        .collect::<Result<Vec<()>, Error>>()
        .map(|_| ())
}
