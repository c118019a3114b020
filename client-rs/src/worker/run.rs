//! One lease loop: lease tasks for the free slots, start an attempt per task, keep
//! the leases alive, and drain on stop.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::handler::BoxHandler;
use super::heartbeat::{Heartbeat, Leases};
use super::task::Attempt;
use super::{
    CancelReason, STOP_MARGIN, Worker, WorkerBuilder, WorkerEvent, backoff_delay, complete,
    defaults, metrics, middleware, misconfigured, next, stops_worker,
};
use crate::time::to_proto_duration;
use crate::{Error, pb};

/// The broker's limit on tasks per Lease call.
const MAX_LEASE_BATCH: usize = 256;
impl Worker {
    /// One lease loop over all of this worker's queues.
    pub(super) async fn run_one(
        self,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), Error> {
        let c = &self.config;
        if c.queues.is_empty() {
            return Err(Error::Config("no queue has a handler".into()));
        }
        if c.lease_duration < Duration::from_secs(1) {
            return Err(Error::Config(
                "the lease duration must be at least 1 s".into(),
            ));
        }
        let worker_id = self.worker_id.clone();
        let leases = Arc::new(Leases::default());
        let every = c
            .heartbeat_interval
            .unwrap_or(defaults::heartbeat_interval(c.lease_duration));
        let heartbeat = Heartbeat {
            client: c.client.clone(),
            worker_id: worker_id.clone(),
            leases: leases.clone(),
            every,
            extend_by: c.lease_duration,
            events: self.events.clone(),
        };
        let metrics = metrics::Metrics::new(
            &c.meter
                .clone()
                .unwrap_or_else(|| opentelemetry::global::meter("taskbroker")),
        );
        let handlers: HashMap<String, BoxHandler> = c
            .handlers
            .iter()
            .map(|(q, h)| {
                let h = match c.policies.get(q) {
                    Some(p) => crate::policy::classified(h.clone(), p.clone()),
                    None => h.clone(),
                };
                (q.clone(), middleware::wrap(h, &c.middleware))
            })
            .collect();
        let stop_beating = CancellationToken::new();
        // lease_next: settles ask for their slot's next task until stopping.
        let stopping = CancellationToken::new();
        let chain = next::Chain {
            handlers: Arc::new(handlers),
            lease: pb::LeaseRequest {
                wait: None,
                ..lease_request(c, &worker_id, 1)
            },
            lease_duration: c.lease_duration,
            stopping: stopping.clone(),
            client: c.client.clone(),
            events: self.events.clone(),
        };
        let mut run = Run {
            worker: &self,
            worker_id,
            leases,
            completer: complete::Completer::start(
                self.config.client.clone(),
                metrics.clone(),
                self.events.clone(),
            ),
            metrics,
            // Dropping the set (when `run` is dropped) aborts every handler with it.
            tasks: JoinSet::new(),
            hard_stop: CancellationToken::new(),
            chain,
        };
        let main = async {
            let result = run.lease_loop(shutdown).await;
            stopping.cancel();
            let _ = self.events.send(WorkerEvent::Stopping);
            run.drain().await;
            // Beat until the last report is in: a report may be retried.
            stop_beating.cancel();
            result
        };
        let (result, ()) = tokio::join!(main, heartbeat.run(stop_beating.clone()));
        result
    }
}

/// The state of one `Worker::run`.
struct Run<'a> {
    worker: &'a Worker,
    worker_id: String,
    leases: Arc<Leases>,
    completer: complete::Completer,
    metrics: metrics::Metrics,
    tasks: JoinSet<()>,
    hard_stop: CancellationToken,
    chain: next::Chain,
}

impl Run<'_> {
    /// Leases for free slots until `shutdown` completes or the broker refuses the
    /// worker's settings.
    async fn lease_loop(&mut self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        let c = &self.worker.config;
        let slots = Arc::new(Semaphore::new(c.concurrency));
        tokio::pin!(shutdown);
        let mut failures = 0;
        // Until a Lease has been answered, a configuration error may end the run.
        let mut answered = false;
        loop {
            self.reap_finished();
            let mut permit = tokio::select! {
                biased;
                _ = &mut shutdown => return Ok(()),
                // The semaphore is never closed, so acquiring only waits.
                p = slots.clone().acquire_owned() => p.expect("the slot semaphore is never closed"),
            };
            // Take every other free slot too, so one Lease fills them all.
            let free = slots.available_permits().min(MAX_LEASE_BATCH - 1);
            if free > 0
                && let Ok(more) = slots.clone().try_acquire_many_owned(free as u32)
            {
                permit.merge(more);
            }
            let req = self.lease_request(permit.num_permits() as u32);
            let sent_at = Instant::now();
            let leased = tokio::select! {
                biased;
                // Dropping the call cancels it. Should the broker have granted tasks
                // in that very instant, their leases run out and they are leased
                // again: correctness never depends on a graceful stop.
                _ = &mut shutdown => return Ok(()),
                r = c.client.lease(req) => r,
            };
            if leased.is_ok() {
                answered = true;
            }
            match leased {
                Ok(tasks) if !tasks.is_empty() => {
                    failures = 0;
                    // A long poll's lease starts when the broker grants it, just before
                    // this answer arrives: the local clock counts it from now.
                    self.start_all(tasks, permit, Instant::now());
                    continue;
                }
                // Nothing within the whole wait: ask again at once.
                Ok(_) if !c.lease_wait.is_zero() && sent_at.elapsed() >= c.lease_wait / 2 => {
                    failures = 0;
                    continue;
                }
                // Empty long before the wait was over: the broker is draining (or the
                // wait is zero). Back off instead of asking again in a tight loop.
                Ok(_) => tracing::debug!("lease answered empty early"),
                Err(e) if stops_worker(&e) => return Err(e),
                Err(e) if c.fail_fast && !answered && misconfigured(&e) => {
                    tracing::error!(error = %e, "the first Lease failed for a reason retrying cannot fix; stopping (fail_fast)");
                    return Err(e);
                }
                Err(e) => tracing::warn!(error = %e, "lease failed; retrying"),
            }
            drop(permit);
            let pause = backoff_delay(failures);
            failures = failures.saturating_add(1);
            tokio::select! {
                biased;
                _ = &mut shutdown => return Ok(()),
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    fn lease_request(&self, max_tasks: u32) -> pb::LeaseRequest {
        lease_request(&self.worker.config, &self.worker_id, max_tasks)
    }

    /// Starts each leased task in one of the slots `permit` holds; the slots left
    /// over are freed when `permit` is dropped at the end.
    fn start_all(
        &mut self,
        tasks: Vec<pb::LeasedTask>,
        mut permit: OwnedSemaphorePermit,
        sent_at: Instant,
    ) {
        let _ = self.worker.events.send(WorkerEvent::Leased {
            asked: permit.num_permits() as u32,
            count: tasks.len(),
        });
        for t in tasks {
            let Some(slot) = permit.split(1) else {
                // The broker never returns more than max_tasks; if it did, the extra
                // tasks are left to expire rather than overrun the slots.
                tracing::error!(task_id = %t.task_id, "the broker returned more tasks than asked for");
                break;
            };
            self.start(t, slot, sent_at);
        }
    }

    fn start(&mut self, task: pb::LeasedTask, permit: OwnedSemaphorePermit, sent_at: Instant) {
        let c = &self.worker.config;
        // No handler for its queue cannot happen (only the handlers' queues are
        // leased); the lease runs out and the broker retries the task.
        let Some((shared, handler)) = self.chain.begin(task, sent_at) else {
            return;
        };
        self.leases.insert(shared.clone());
        let attempt = Attempt {
            shared,
            handler,
            client: c.client.clone(),
            completer: self.completer.clone(),
            metrics: self.metrics.clone(),
            leases: self.leases.clone(),
            hard_stop: self.hard_stop.clone(),
            events: self.worker.events.clone(),
            permit,
            chain: self.chain.clone(),
            next: next::Next::default(),
        };
        self.tasks.spawn(attempt.run());
    }

    /// Collects the attempts that are over, so the set does not grow.
    fn reap_finished(&mut self) {
        while let Some(r) = self.tasks.try_join_next() {
            log_join(r);
        }
    }

    /// Waits the grace period for running handlers, then cuts the rest off (they
    /// report Fail, retryable, retry_after 0) and waits for their reports, at most
    /// `STOP_MARGIN` (docs/client-spec.md point 11): a report still unanswered then
    /// (the broker unreachable) is dropped and its task waits for its lease to expire.
    async fn drain(&mut self) {
        let grace = self.worker.config.shutdown_grace;
        let tasks = &mut self.tasks;
        let all_done = async {
            while let Some(r) = tasks.join_next().await {
                log_join(r);
            }
        };
        if tokio::time::timeout(grace, all_done).await.is_err() {
            tracing::warn!(
                ?grace,
                "handlers still running after the grace period; cancelling them"
            );
            self.leases.cancel_all(CancelReason::ShuttingDown);
            self.hard_stop.cancel();
            let tasks = &mut self.tasks;
            let reported = async {
                while let Some(r) = tasks.join_next().await {
                    log_join(r);
                }
            };
            if tokio::time::timeout(STOP_MARGIN, reported).await.is_err() {
                tracing::warn!(
                    unreported = self.tasks.len(),
                    "the broker did not take the hand-backs within the stop margin; those tasks wait for their leases to expire"
                );
                self.tasks.abort_all();
                while self.tasks.join_next().await.is_some() {}
            }
        }
    }
}

fn log_join(r: Result<(), tokio::task::JoinError>) {
    if let Err(e) = r {
        // Handler panics are caught inside the attempt; this is the runtime's own.
        tracing::error!(error = %e, "a task attempt ended abnormally");
    }
}

/// The runtime's Lease for `max_tasks` slots.
fn lease_request(c: &WorkerBuilder, worker_id: &str, max_tasks: u32) -> pb::LeaseRequest {
    pb::LeaseRequest {
        worker_id: worker_id.to_string(),
        queues: c.queues.clone(),
        max_tasks,
        lease_duration: Some(to_proto_duration(c.lease_duration)),
        wait: Some(to_proto_duration(c.lease_wait)),
        labels: c.labels.clone(),
    }
}
