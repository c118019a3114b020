//! `WorkerBuilder`: the handlers of a worker, their policies and middleware, and
//! its settings.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;

use super::{Json, Next, TaskContext, TaskError, TaskOutput, Worker, WorkerBuilder};
use super::{handler, middleware};
use crate::{QueuePolicy, TaskDef};

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
