//! The worker runtime: lease tasks for free slots only, run each under its handler,
//! keep the leases alive with batched heartbeats, report the outcome, and stop
//! gracefully.
//!
//! - `mod.rs` (this file): `Worker`, its builder, the lease loop and shutdown.
//! - `context.rs`: `TaskContext`, what a handler sees (payload, checkpoint, cancel).
//! - `handler.rs`: `TaskError` and `TaskOutput`, what a handler returns.
//! - `heartbeat.rs`: the running leases and the Heartbeat loop.
//! - `task.rs`: one attempt: run the handler, catch panics, report with retries.
//! - `event.rs`: `WorkerEvent`, what a worker tells subscribers.
//! - `next.rs`: lease_next, a slot's next task asked for with its settle.
//! - `complete.rs`: Completes gathered into CompleteMany while a call is in flight.
//! - `middleware.rs`: code around every handler call.
//! - `metrics.rs`: the runtime's OpenTelemetry instruments.

mod complete;
pub(crate) mod context;
mod event;
pub(crate) mod handler;
mod heartbeat;
mod metrics;
pub(crate) mod middleware;
mod next;
mod own_slots;
pub(crate) mod task;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use context::{CancelReason, TaskContext};
pub use event::{LeaseUpdate, Outcome, WorkerEvent};
pub use handler::{BoxError, Json, TaskError, TaskOutput};
pub use middleware::Next;

use handler::BoxHandler;
use heartbeat::{Heartbeat, Leases};
use task::Attempt;

use crate::time::to_proto_duration;
use crate::{Client, Error, QueuePolicy, TaskDef, pb};

/// The broker's limit on tasks per Lease call.
const MAX_LEASE_BATCH: usize = 256;

/// What a stop may take past its grace period (docs/client-spec.md point 11): the
/// hand-backs of the handlers cut off then.
pub const STOP_MARGIN: Duration = Duration::from_secs(2);

/// The defaults of docs/client-spec.md, point 1.
pub mod defaults {
    use std::time::Duration;

    /// Handlers running at once (and leases held at most).
    pub const CONCURRENCY: usize = 4;
    /// The Lease long-poll wait.
    pub const POLL_WAIT: Duration = Duration::from_secs(10);
    /// The lease duration, also every extension.
    pub const LEASE_DURATION: Duration = Duration::from_secs(30);
    /// How long running handlers may finish after a stop before they are cancelled.
    pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);
    /// The first backoff ceiling; it doubles per failure in a row.
    pub const BACKOFF_BASE: Duration = Duration::from_millis(200);
    /// The largest backoff ceiling.
    pub const BACKOFF_MAX: Duration = Duration::from_secs(10);

    /// A third of the lease: two heartbeats may fail before a lease runs out.
    pub fn heartbeat_interval(lease: Duration) -> Duration {
        lease / 3
    }
}

/// The longest pause after `failures` failed calls in a row (0 = the first):
/// `min(BACKOFF_MAX, BACKOFF_BASE * 2^failures)`.
pub fn backoff_ceiling(failures: u32) -> Duration {
    backoff_bounded(failures, defaults::BACKOFF_BASE, defaults::BACKOFF_MAX)
}

/// Exponential backoff with full jitter: a random pause in `[0.1, 1] x
/// backoff_ceiling(failures)`. Spreads reconnecting workers out instead of having them
/// retry in step.
pub fn backoff_delay(failures: u32) -> Duration {
    backoff(failures, defaults::BACKOFF_BASE, defaults::BACKOFF_MAX)
}

fn backoff_bounded(attempt: u32, base: Duration, max: Duration) -> Duration {
    base.saturating_mul(1u32 << attempt.min(16)).min(max)
}

pub(crate) fn backoff(attempt: u32, base: Duration, max: Duration) -> Duration {
    backoff_bounded(attempt, base, max).mul_f64(rand::random::<f64>().max(0.1))
}

/// Completes on SIGTERM (how Kubernetes stops a pod) or Ctrl-C: pass it to
/// [`Worker::run`] so either drains the worker (spec point 6).
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Builds a [`Worker`]; see [`Worker::builder`].
pub struct WorkerBuilder {
    client: Client,
    handlers: HashMap<String, BoxHandler>,
    queues: Vec<String>,
    concurrency: usize,
    lease_duration: Duration,
    heartbeat_interval: Option<Duration>,
    lease_wait: Duration,
    shutdown_grace: Duration,
    worker_id: Option<String>,
    /// What this worker is, sent with every Lease (routing).
    labels: HashMap<String, String>,
    middleware: Vec<middleware::BoxMiddleware>,
    meter: Option<opentelemetry::metrics::Meter>,
    fail_fast: bool,
    /// Policies declared with the handlers, by queue (spec point 20).
    policies: HashMap<String, QueuePolicy>,
}

/// Leases tasks from its queues and runs them, at most `concurrency` at a time.
pub struct Worker {
    config: WorkerBuilder,
    worker_id: String,
    events: broadcast::Sender<WorkerEvent>,
}

impl WorkerBuilder {
    /// Runs `handler` for the tasks of `queue`. A handler is an async fn of a
    /// [`TaskContext`] returning `Result<O, TaskError>`, where `O` is `Vec<u8>`,
    /// `String`, `&'static str`, `()` or [`Json`].
    pub fn queue<H, Fut, O>(mut self, queue: impl Into<String>, handler: H) -> Self
    where
        H: Fn(TaskContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, TaskError>> + Send + 'static,
        O: TaskOutput,
    {
        let queue = queue.into();
        if !self.queues.contains(&queue) {
            self.queues.push(queue.clone());
        }
        self.handlers.insert(queue, handler::boxed(handler));
        self
    }

    /// Runs `handler` for the tasks of `queue` with the payload decoded from JSON into
    /// `T`, and stores what it returns as the JSON result. A payload that is not a
    /// valid `T` fails the attempt for good, with the queue and the type in the error.
    pub fn queue_json<T, R, H, Fut>(self, queue: impl Into<String>, handler: H) -> Self
    where
        T: serde::de::DeserializeOwned + Send + 'static,
        R: serde::Serialize + Send + 'static,
        H: Fn(TaskContext, T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, TaskError>> + Send + 'static,
    {
        let queue = queue.into();
        let name = queue.clone();
        let handler = Arc::new(handler);
        self.queue(queue, move |ctx: TaskContext| {
            let decoded = serde_json::from_slice::<T>(ctx.payload()).map_err(|e| {
                TaskError::permanent(format!(
                    "payload of a {name} task is not a valid {}: {e}",
                    short_type_name::<T>()
                ))
            });
            let handler = handler.clone();
            async move { handler(ctx, decoded?).await.map(Json) }
        })
    }

    /// Declares `queue`'s policy (docs/client-spec.md point 20): its retry defaults
    /// fill the unset retry fields of the queue's tasks submitted through this
    /// worker's client (and its clones) from now on; its non-retryable error types
    /// fail an attempt for good; its concurrency gives the queue slots of its own.
    pub fn policy(mut self, queue: impl Into<String>, policy: QueuePolicy) -> Self {
        let queue = queue.into();
        self.client.retry_defaults.set(&queue, policy.retry());
        self.policies.insert(queue, policy);
        self
    }

    /// Runs `handler` for the tasks of `def`'s queue, as [`WorkerBuilder::queue_json`]
    /// with the definition's payload and result types, under its policy if it has one.
    pub fn task<P, R, H, Fut>(self, def: &TaskDef<P, R>, handler: H) -> Self
    where
        P: serde::de::DeserializeOwned + Send + 'static,
        R: serde::Serialize + Send + 'static,
        H: Fn(TaskContext, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, TaskError>> + Send + 'static,
    {
        let this = match def.queue_policy() {
            Some(p) => self.policy(def.queue(), p.clone()),
            None => self,
        };
        this.queue_json(def.queue(), handler)
    }

    /// Adds a middleware around every handler of this worker: an async fn of the
    /// task's [`TaskContext`] and the rest of the chain ([`Next`]) returning the
    /// outcome. The first added is the outermost. A panic inside one is caught and
    /// fails the attempt like a handler's.
    pub fn middleware<M, Fut>(mut self, m: M) -> Self
    where
        M: Fn(TaskContext, Next) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<u8>, TaskError>> + Send + 'static,
    {
        self.middleware.push(middleware::boxed(m));
        self
    }

    /// The meter the runtime's metrics are recorded with (docs/client-spec.md,
    /// "Middleware and metrics"). Default: the global provider's `taskbroker` meter.
    pub fn meter(mut self, meter: opentelemetry::metrics::Meter) -> Self {
        self.meter = Some(meter);
        self
    }

    /// Stop at once, with the error, when a Lease fails because the configuration
    /// is wrong for good (TLS on one side only, a certificate refused, an address
    /// that does not speak gRPC) before any call has succeeded. Without it such
    /// errors are retried with backoff, as a broker that is still starting is.
    /// Refusals of the worker itself (a bad token, PERMISSION_DENIED) stop it either way.
    pub fn fail_fast(mut self, on: bool) -> Self {
        self.fail_fast = on;
        self
    }

    /// Handlers running at once, at least 1. Default 4. The worker never holds more
    /// leases than this.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// How long a lease lasts without a heartbeat; also how long a crashed worker's
    /// tasks wait before the broker hands them out again. Default 30 s.
    pub fn lease_duration(mut self, d: Duration) -> Self {
        self.lease_duration = d;
        self
    }

    /// Time between Heartbeat calls. Default: a third of the lease duration, so two
    /// beats may fail before a lease runs out.
    pub fn heartbeat_interval(mut self, d: Duration) -> Self {
        self.heartbeat_interval = Some(d);
        self
    }

    /// How long one Lease call waits for a task to arrive (long poll). Default 10 s.
    pub fn lease_wait(mut self, d: Duration) -> Self {
        self.lease_wait = d;
        self
    }

    /// After shutdown is asked for, how long running handlers may take to finish
    /// before they are cancelled and their tasks handed back. Default 30 s.
    pub fn shutdown_grace(mut self, d: Duration) -> Self {
        self.shutdown_grace = d;
        self
    }

    /// The name this worker leases under (shown in attempts and `taskbroker list`).
    /// Default: `rust-<pid>-<random>`.
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = Some(id.into());
        self
    }

    /// A label of this worker (`gpu=a100`, `region=eu`), sent with every Lease:
    /// tasks targeted at labels go only to workers that carry all of them. At most
    /// 32; the broker refuses a bad one when the worker first leases.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    pub fn build(self) -> Worker {
        // Large enough that a subscriber reading as events come rarely lags.
        let (events, _) = broadcast::channel(1024);
        let worker_id = self.worker_id.clone().unwrap_or_else(|| {
            format!("rust-{}-{:04x}", std::process::id(), rand::random::<u16>())
        });
        Worker {
            config: self,
            worker_id,
            events,
        }
    }
}

impl Worker {
    pub fn builder(client: Client) -> WorkerBuilder {
        WorkerBuilder {
            client,
            handlers: HashMap::new(),
            queues: Vec::new(),
            concurrency: defaults::CONCURRENCY,
            lease_duration: defaults::LEASE_DURATION,
            heartbeat_interval: None,
            lease_wait: defaults::POLL_WAIT,
            shutdown_grace: defaults::STOP_TIMEOUT,
            worker_id: None,
            labels: HashMap::new(),
            middleware: Vec::new(),
            meter: None,
            fail_fast: false,
            policies: HashMap::new(),
        }
    }

    /// Events from now on; see [`WorkerEvent`].
    pub fn subscribe(&self) -> broadcast::Receiver<WorkerEvent> {
        self.events.subscribe()
    }

    /// The id this worker leases under.
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// The settings in effect: concurrency, lease duration, heartbeat interval, poll
    /// wait and stop timeout, in that order.
    pub fn settings(&self) -> (usize, Duration, Duration, Duration, Duration) {
        let c = &self.config;
        (
            c.concurrency,
            c.lease_duration,
            c.heartbeat_interval
                .unwrap_or(defaults::heartbeat_interval(c.lease_duration)),
            c.lease_wait,
            c.shutdown_grace,
        )
    }

    /// Runs until [`shutdown_signal`] (SIGTERM or Ctrl-C), then drains as [`Worker::run`].
    pub async fn run_until_signal(self) -> Result<(), Error> {
        self.run(shutdown_signal()).await
    }

    /// Runs until `shutdown` completes, then stops leasing, gives running handlers
    /// the grace period, cancels the rest and hands their tasks back. Returns an
    /// error only for settings the broker refuses (bad queue name, lease duration).
    /// Dropping the future instead is a crash as far as the broker knows: the
    /// leases run out and the tasks are leased again.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), Error> {
        match self.split_by_slots() {
            Some(parts) => own_slots::run_parts(parts, shutdown).await,
            None => self.run_one(shutdown).await,
        }
    }

    /// One lease loop over all of this worker's queues.
    async fn run_one(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), Error> {
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

/// `T`'s name without its module path (`Email` for `my_app::mail::Email`).
fn short_type_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    let base = full.split('<').next().unwrap_or(full);
    let start = base.rfind("::").map(|i| i + 2).unwrap_or(0);
    if full.len() > base.len() {
        &full[start..]
    } else {
        &base[start..]
    }
}

/// Whether a failed call says the client's configuration cannot work against that
/// address: TLS on one side only or refused, or an answer that is not gRPC. A
/// refused connection or a timeout is not (the broker may still be starting).
pub fn misconfigured(e: &Error) -> bool {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    let text = text.to_ascii_lowercase();
    [
        "tls",
        "certificate",
        "handshake",
        "invalidcontenttype",
        "corrupt message",
        "protocol error",
        "frame with invalid size",
        "http2 error",
        "broken pipe",
        "connection reset",
    ]
    .iter()
    .any(|needle| text.contains(needle))
        && !text.contains("connection refused")
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

/// Errors that retrying the same Lease cannot fix, so they stop the worker (spec point
/// 5): UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT, UNIMPLEMENTED, and an
/// answer that is not gRPC at all (the broker's HTTP port, another HTTP server): tonic
/// reads its body as gRPC frames and fails with INTERNAL "protocol error: ...".
pub fn stops_worker(e: &Error) -> bool {
    use tonic::Code;
    match e.code() {
        Some(
            Code::InvalidArgument
            | Code::Unauthenticated
            | Code::PermissionDenied
            | Code::Unimplemented,
        ) => true,
        Some(Code::Internal | Code::Unknown) => not_grpc(e),
        _ => false,
    }
}

/// Whether a status was made by tonic from an answer that is not gRPC (no broker
/// writes these messages).
fn not_grpc(e: &Error) -> bool {
    e.status()
        .is_some_and(|s| s.message().starts_with("protocol error:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_backoff_doubles_from_200ms_to_a_10s_ceiling_with_jitter() {
        assert_eq!(backoff_ceiling(0), Duration::from_millis(200));
        assert_eq!(backoff_ceiling(3), Duration::from_millis(1600));
        assert_eq!(backoff_ceiling(10), Duration::from_secs(10));
        assert_eq!(backoff_ceiling(u32::MAX), Duration::from_secs(10));
        let draws: Vec<Duration> = (0..50).map(|_| backoff_delay(3)).collect();
        assert!(draws.iter().all(|d| *d >= Duration::from_millis(160)));
        assert!(draws.iter().any(|d| *d != draws[0]), "no jitter: {draws:?}");
    }

    #[test]
    fn only_the_four_unfixable_codes_stop_a_worker() {
        use tonic::Code;
        for (code, stops) in [
            (Code::Unauthenticated, true),
            (Code::PermissionDenied, true),
            (Code::InvalidArgument, true),
            (Code::Unimplemented, true),
            (Code::Unavailable, false),
            (Code::OutOfRange, false),
            (Code::Aborted, false),
            (Code::Internal, false),
        ] {
            let e = Error::from(tonic::Status::new(code, "x"));
            assert_eq!(stops_worker(&e), stops, "{code:?}");
        }
    }

    #[test]
    fn an_answer_that_is_not_grpc_stops_a_worker() {
        // What tonic makes of an HTTP server's 403 page read as gRPC frames.
        let e = Error::from(tonic::Status::internal(
            "protocol error: received message with invalid compression flag: 60 (valid flags are 0 and 1) while receiving response with status: 403 Forbidden",
        ));
        assert!(stops_worker(&e));
        // INTERNAL from the broker itself is retried.
        let e = Error::from(tonic::Status::internal("database is locked"));
        assert!(!stops_worker(&e));
    }

    #[test]
    fn backoff_is_bounded_and_never_zero() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(5);
        for attempt in 0..100 {
            let d = backoff(attempt, base, max);
            assert!(d <= max, "{attempt}: {d:?}");
            assert!(d >= base.min(max).mul_f64(0.1) / 2, "{attempt}: {d:?}");
        }
    }
}
