//! The worker runtime: lease tasks for free slots only, run each under its handler,
//! keep the leases alive with batched heartbeats, report the outcome, and stop
//! gracefully.
//!
//! - `mod.rs` (this file): `Worker`, its settings, and shutdown.
//! - `context.rs`: `TaskContext`, what a handler sees (payload, checkpoint, cancel).
//! - `handler.rs`: `TaskError` and `TaskOutput`, what a handler returns.
//! - `heartbeat.rs`: the running leases and the Heartbeat loop.
//! - `task.rs`: one attempt: run the handler, catch panics, report with retries.
//! - `event.rs`: `WorkerEvent`, what a worker tells subscribers.
//! - `next.rs`: lease_next, a slot's next task asked for with its settle.
//! - `complete.rs`: Completes gathered into CompleteMany while a call is in flight.
//! - `middleware.rs`: code around every handler call.
//! - `metrics.rs`: the runtime's OpenTelemetry instruments.
//! - `builder.rs`: `WorkerBuilder`'s settings and handler registration.
//! - `run.rs`: one lease loop: lease for free slots, start attempts, drain on stop.
//! - `retry.rs`: backoff, and which Lease errors stop a worker.

mod builder;
mod complete;
pub(crate) mod context;
mod event;
pub(crate) mod handler;
mod heartbeat;
mod metrics;
pub(crate) mod middleware;
mod next;
mod own_slots;
mod retry;
mod run;
pub(crate) mod task;

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use tokio::sync::broadcast;

pub use context::{CancelReason, TaskContext};
pub use event::{LeaseUpdate, Outcome, WorkerEvent};
pub use handler::{BoxError, Json, TaskError, TaskOutput};
pub use middleware::Next;
pub(crate) use retry::backoff;
pub use retry::{backoff_ceiling, backoff_delay, misconfigured, stops_worker};

use handler::BoxHandler;

use crate::{Client, Error, QueuePolicy};

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
}
