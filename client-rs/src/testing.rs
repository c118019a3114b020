//! Testing handlers without a broker.
//!
//! - [`TestContext`]: the [`TaskContext`] a handler receives, built from a queue and a
//!   payload (and whatever else the test sets: attempt, metadata, the checkpoint an
//!   earlier attempt saved), which records what the handler did: its checkpoints, its
//!   cancel checks and its outcome ([`TestOutcome`]).
//! - [`FakeBroker`]: handlers and middleware registered as on a [`crate::Worker`] (`queue`,
//!   `queue_json`, `middleware`) and the producer calls of a [`crate::Client`] (`submit`,
//!   `submit_json`, `wait`, `submit_and_wait`, `submit_and_wait_json`). A submit runs
//!   the task's handler in-process at once, attempt after attempt as the broker would
//!   (no backoff), until it succeeds, fails permanently or its attempts run out.
//!
//! ```
//! use taskbroker_client::testing::{TestContext, TestOutcome};
//! use taskbroker_client::{TaskContext, TaskError};
//!
//! async fn resize(ctx: TaskContext) -> Result<String, TaskError> {
//!     if ctx.payload().is_empty() {
//!         return Err(TaskError::permanent("no image"));
//!     }
//!     ctx.checkpoint(b"half".to_vec()).await?;
//!     Ok("done".into())
//! }
//!
//! # tokio_test_block_on(async {
//! let t = TestContext::new("images", b"png".to_vec());
//! assert_eq!(t.run(resize).await, TestOutcome::Completed(b"done".to_vec()));
//! assert_eq!(t.checkpoints(), vec![b"half".to_vec()]);
//! let t = TestContext::new("images", Vec::new());
//! assert!(t.run(resize).await.is_permanent_failure());
//! # });
//! # fn tokio_test_block_on(f: impl std::future::Future<Output = ()>) {
//! #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
//! # }
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::worker::Next;
use crate::worker::TaskOutput;
use crate::worker::context::Shared;
use crate::worker::handler::{self, BoxHandler};
use crate::worker::middleware::{self, BoxMiddleware};
use crate::{CancelReason, Client, Error, LEASE_LOST, Submitted, TaskContext, TaskError};
use crate::{TaskSpec, TaskState, pb};

/// The attempts a task gets when its spec sets none (the broker's default).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// What a test context saw; shared with the [`TaskContext`] it built.
#[derive(Default)]
pub(crate) struct Record {
    checkpoints: Mutex<Vec<Vec<u8>>>,
    cancel_checks: AtomicUsize,
    /// The checkpoint (1-based) whose answer says an operator cancelled the task.
    cancel_at_checkpoint: Option<usize>,
    /// The checkpoint (1-based) answered LEASE_LOST.
    lose_at_checkpoint: Option<usize>,
    outcome: Mutex<Option<TestOutcome>>,
}

impl Record {
    /// Records a checkpoint. `Ok(true)`: its answer asks the handler to stop.
    pub(crate) fn checkpointed(&self, checkpoint: Vec<u8>) -> Result<bool, Error> {
        let mut saved = self.checkpoints.lock().unwrap_or_else(|p| p.into_inner());
        let n = saved.len() + 1;
        if self.lose_at_checkpoint == Some(n) {
            return Err(Error::Status {
                code: tonic::Code::Aborted,
                message: "the lease is lost".into(),
                reason: Some(LEASE_LOST.into()),
                status: Box::new(tonic::Status::aborted("the lease is lost")),
            });
        }
        saved.push(checkpoint);
        Ok(self.cancel_at_checkpoint.is_some_and(|at| n >= at))
    }

    pub(crate) fn cancel_checked(&self) {
        self.cancel_checks.fetch_add(1, Ordering::SeqCst);
    }
}

/// How a handler's attempt ended, as the worker would report it.
#[derive(Debug, Clone, PartialEq)]
pub enum TestOutcome {
    /// The handler returned `Ok`: the worker reports Complete with these bytes.
    Completed(Vec<u8>),
    /// The handler returned an error or panicked: the worker reports Fail.
    Failed {
        message: String,
        /// False for [`TaskError::permanent`] (and a payload `ctx.json` cannot decode).
        retryable: bool,
        /// What [`TaskError::retry_after`] asked for.
        retry_after: Option<Duration>,
        /// What [`TaskError::cool_down_key`] or [`TaskError::cool_down_bucket`] asked
        /// for: the scope and how long.
        cooldown: Option<(crate::pb::CooldownScope, Duration)>,
    },
}

impl TestOutcome {
    pub fn is_completed(&self) -> bool {
        matches!(self, TestOutcome::Completed(_))
    }

    pub fn is_permanent_failure(&self) -> bool {
        matches!(
            self,
            TestOutcome::Failed {
                retryable: false,
                ..
            }
        )
    }

    pub fn is_retryable_failure(&self) -> bool {
        matches!(
            self,
            TestOutcome::Failed {
                retryable: true,
                ..
            }
        )
    }

    fn of(result: Result<Vec<u8>, TaskError>) -> Self {
        match result {
            Ok(bytes) => TestOutcome::Completed(bytes),
            Err(e) => TestOutcome::Failed {
                message: e.message().to_string(),
                retryable: e.is_retryable(),
                retry_after: e.retry_delay(),
                cooldown: e.cooldown(),
            },
        }
    }
}

/// A [`TaskContext`] built without a broker, and what the handler did with it.
///
/// Its `client()` points at no broker (`http://127.0.0.1:1`): a handler that submits
/// follow-up tasks through it gets a connection error. Heartbeats are the worker
/// runtime's, not the handler's: there are none to record.
pub struct TestContext {
    ctx: TaskContext,
    record: Arc<Record>,
}

/// Sets the task a [`TestContext`] hands the handler.
pub struct TestContextBuilder {
    task: pb::LeasedTask,
    cancel_at_checkpoint: Option<usize>,
    lose_at_checkpoint: Option<usize>,
}

impl TestContextBuilder {
    pub fn task_id(mut self, id: impl Into<String>) -> Self {
        self.task.task_id = id.into();
        self
    }

    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.task.key = key.into();
        self
    }

    /// The attempt number (1-based; 1 by default).
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.task.attempt = attempt;
        self
    }

    /// 3 by default.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.task.max_attempts = n;
        self
    }

    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.task.metadata.insert(key.into(), value.into());
        self
    }

    /// The checkpoint an earlier attempt saved: `last_checkpoint()` returns it.
    pub fn checkpoint(mut self, checkpoint: impl Into<Vec<u8>>) -> Self {
        self.task.checkpoint = checkpoint.into();
        self.task.has_checkpoint = true;
        self
    }

    pub fn dependency_result(
        mut self,
        task_id: impl Into<String>,
        result: impl Into<Vec<u8>>,
    ) -> Self {
        self.task
            .dependency_results
            .insert(task_id.into(), result.into());
        self
    }

    pub fn at_most_once(mut self) -> Self {
        self.task.at_most_once = true;
        self.task.max_attempts = 1;
        self
    }

    pub fn fencing_token(mut self, token: u64) -> Self {
        self.task.fencing_token = token;
        self
    }

    /// The `n`th checkpoint's answer (1-based) says an operator cancelled the task:
    /// from then on `cancelled()` fires with [`CancelReason::CancelRequested`].
    pub fn cancel_at_checkpoint(mut self, n: usize) -> Self {
        self.cancel_at_checkpoint = Some(n);
        self
    }

    /// The `n`th checkpoint (1-based) is answered LEASE_LOST: it returns the error
    /// (`is_lease_lost()`) and `cancelled()` fires with [`CancelReason::LeaseLost`].
    pub fn lose_lease_at_checkpoint(mut self, n: usize) -> Self {
        self.lose_at_checkpoint = Some(n);
        self
    }

    pub fn build(self) -> TestContext {
        let record = Arc::new(Record {
            cancel_at_checkpoint: self.cancel_at_checkpoint,
            lose_at_checkpoint: self.lose_at_checkpoint,
            ..Record::default()
        });
        let shared = Shared::for_test(self.task, offline_client(), record.clone());
        TestContext {
            ctx: TaskContext {
                shared: Arc::new(shared),
            },
            record,
        }
    }
}

/// A client on a channel that never connects (nothing listens on port 1).
fn offline_client() -> Client {
    Client::from_channel(
        tonic::transport::Endpoint::from_static("http://127.0.0.1:1").connect_lazy(),
    )
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

fn next_task_id() -> String {
    format!("test-task-{}", NEXT_ID.fetch_add(1, Ordering::SeqCst))
}

impl TestContext {
    /// A context for attempt 1 of 3 of a task of `queue` carrying `payload`.
    pub fn new(queue: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        TestContext::builder(queue, payload).build()
    }

    pub fn builder(queue: impl Into<String>, payload: impl Into<Vec<u8>>) -> TestContextBuilder {
        TestContextBuilder {
            task: pb::LeasedTask {
                task_id: next_task_id(),
                queue: queue.into(),
                payload: payload.into(),
                attempt: 1,
                max_attempts: DEFAULT_MAX_ATTEMPTS,
                lease_token: "test-lease".into(),
                fencing_token: 1,
                ..Default::default()
            },
            cancel_at_checkpoint: None,
            lose_at_checkpoint: None,
        }
    }

    /// The context to hand the handler (a clone shares the recording).
    pub fn context(&self) -> TaskContext {
        self.ctx.clone()
    }

    /// Runs `handler` on this context as the worker would (a panic becomes a retryable
    /// failure), records and returns the outcome.
    pub async fn run<H, Fut, O>(&self, handler: H) -> TestOutcome
    where
        H: Fn(TaskContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, TaskError>> + Send + 'static,
        O: TaskOutput,
    {
        self.run_boxed(&handler::boxed(handler)).await
    }

    async fn run_boxed(&self, handler: &BoxHandler) -> TestOutcome {
        let ctx = self.context();
        let run = AssertUnwindSafe(async move { handler(ctx).await }).catch_unwind();
        let outcome = match run.await {
            Ok(result) => TestOutcome::of(result),
            Err(payload) => TestOutcome::Failed {
                message: format!(
                    "panic: {}",
                    crate::worker::task::panic_message(payload.as_ref())
                ),
                retryable: true,
                retry_after: None,
                cooldown: None,
            },
        };
        *self
            .record
            .outcome
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(outcome.clone());
        outcome
    }

    /// Fires the handler's `cancelled()` with `reason` (an operator's cancel, a lost
    /// lease, the worker's shutdown, the deadline).
    pub fn cancel(&self, reason: CancelReason) {
        self.ctx.shared.cancel(reason);
    }

    /// The checkpoints the handler saved, in order.
    pub fn checkpoints(&self) -> Vec<Vec<u8>> {
        self.record
            .checkpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// How many times the handler asked `is_cancelled()` or `cancelled()`.
    pub fn cancel_checks(&self) -> usize {
        self.record.cancel_checks.load(Ordering::SeqCst)
    }

    /// The outcome of the last [`TestContext::run`], if any.
    pub fn outcome(&self) -> Option<TestOutcome> {
        self.record
            .outcome
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// One task the fake broker ran.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeTask {
    pub task_id: String,
    pub queue: String,
    pub key: String,
    pub payload: Vec<u8>,
    /// SUCCEEDED, DEAD, or READY when no handler is registered for its queue.
    pub state: TaskState,
    pub result: Vec<u8>,
    /// The message of the last failed attempt, or empty.
    pub last_error: String,
    /// The attempts made.
    pub attempts: u32,
    /// Each attempt's outcome, in order.
    pub outcomes: Vec<TestOutcome>,
    /// The checkpoint the last attempt left.
    pub checkpoint: Option<Vec<u8>>,
}

/// An in-process stand-in for a broker and a worker: `submit` runs the queue's
/// handler at once, retrying as the broker would (up to the spec's `max_attempts`,
/// 3 by default; one attempt for `at_most_once`; a permanent error ends it), with no
/// backoff. A task of a queue without a handler stays READY. Keys deduplicate as on
/// the broker: a second submit with the same (queue, key) returns the first task.
#[derive(Clone, Default)]
pub struct FakeBroker {
    handlers: Arc<Mutex<HashMap<String, BoxHandler>>>,
    middleware: Arc<Mutex<Vec<BoxMiddleware>>>,
    tasks: Arc<Mutex<Vec<FakeTask>>>,
}

impl FakeBroker {
    pub fn new() -> Self {
        FakeBroker::default()
    }

    /// Registers `handler` for `queue`, as [`crate::worker::WorkerBuilder::queue`].
    pub fn queue<H, Fut, O>(self, queue: impl Into<String>, handler: H) -> Self
    where
        H: Fn(TaskContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, TaskError>> + Send + 'static,
        O: TaskOutput,
    {
        self.lock_handlers()
            .insert(queue.into(), handler::boxed(handler));
        self
    }

    /// Registers a JSON handler, as [`crate::worker::WorkerBuilder::queue_json`].
    pub fn queue_json<T, R, H, Fut>(self, queue: impl Into<String>, handler: H) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        R: Serialize + Send + 'static,
        H: Fn(TaskContext, T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, TaskError>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        self.queue(queue, move |ctx: TaskContext| {
            let decoded = ctx.json::<T>();
            let handler = handler.clone();
            async move { handler(ctx, decoded?).await.map(crate::Json) }
        })
    }

    /// Adds a middleware around every handler, as [`crate::worker::WorkerBuilder::middleware`]
    /// (the first added is the outermost).
    pub fn middleware<M, Fut>(self, m: M) -> Self
    where
        M: Fn(TaskContext, Next) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<u8>, TaskError>> + Send + 'static,
    {
        self.middleware
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(middleware::boxed(m));
        self
    }

    fn lock_handlers(&self) -> std::sync::MutexGuard<'_, HashMap<String, BoxHandler>> {
        self.handlers.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_tasks(&self) -> std::sync::MutexGuard<'_, Vec<FakeTask>> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Submits `spec` and runs it to its end, as `Client::submit`.
    pub async fn submit(&self, spec: TaskSpec) -> Result<Submitted, Error> {
        let spec = spec.into_proto();
        if spec.queue.is_empty() {
            return Err(Error::Status {
                code: tonic::Code::InvalidArgument,
                message: "queue is required".into(),
                reason: None,
                status: Box::new(tonic::Status::invalid_argument("queue is required")),
            });
        }
        if !spec.key.is_empty() {
            let existing = self
                .lock_tasks()
                .iter()
                .find(|t| t.queue == spec.queue && t.key == spec.key)
                .map(|t| t.task_id.clone());
            if let Some(task_id) = existing {
                return Ok(Submitted {
                    task_id,
                    deduplicated: true,
                    copy_task_ids: Vec::new(),
                    replaced: false,
                });
            }
        }
        let task_id = next_task_id();
        let max_attempts = if spec.at_most_once {
            1
        } else {
            spec.retry
                .as_ref()
                .map(|r| r.max_attempts)
                .filter(|&n| n > 0)
                .unwrap_or(DEFAULT_MAX_ATTEMPTS)
        };
        let mut task = FakeTask {
            task_id: task_id.clone(),
            queue: spec.queue.clone(),
            key: spec.key.clone(),
            payload: spec.payload.clone(),
            state: TaskState::Ready,
            result: Vec::new(),
            last_error: String::new(),
            attempts: 0,
            outcomes: Vec::new(),
            checkpoint: None,
        };
        let chain = self
            .middleware
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let handler = self
            .lock_handlers()
            .get(&spec.queue)
            .cloned()
            .map(|h| middleware::wrap(h, &chain));
        if let Some(handler) = handler {
            while task.attempts < max_attempts {
                task.attempts += 1;
                let mut b = TestContext::builder(spec.queue.clone(), spec.payload.clone())
                    .task_id(task_id.clone())
                    .key(spec.key.clone())
                    .attempt(task.attempts)
                    .max_attempts(max_attempts);
                b.task.metadata = spec.metadata.clone();
                b.task.at_most_once = spec.at_most_once;
                b.task.concurrency_key = spec.concurrency_key.clone();
                if let Some(c) = &task.checkpoint {
                    b = b.checkpoint(c.clone());
                }
                let t = b.build();
                let outcome = t.run_boxed(&handler).await;
                task.checkpoint = t.context().last_checkpoint();
                task.outcomes.push(outcome.clone());
                match outcome {
                    TestOutcome::Completed(result) => {
                        task.state = TaskState::Succeeded;
                        task.result = result;
                        break;
                    }
                    TestOutcome::Failed {
                        message, retryable, ..
                    } => {
                        task.last_error = message;
                        if !retryable || task.attempts >= max_attempts {
                            task.state = TaskState::Dead;
                            break;
                        }
                    }
                }
            }
        }
        self.lock_tasks().push(task);
        Ok(Submitted {
            task_id,
            deduplicated: false,
            copy_task_ids: Vec::new(),
            replaced: false,
        })
    }

    /// Submits a task whose payload is the JSON of `value`, as `Client::submit_json`.
    pub async fn submit_json<T: Serialize + ?Sized>(
        &self,
        queue: impl Into<String>,
        value: &T,
    ) -> Result<Submitted, Error> {
        self.submit(TaskSpec::json(queue, value)?).await
    }

    /// The task's outcome, as `Client::wait`: its result when it SUCCEEDED,
    /// `Error::TaskFailed` when it is DEAD, `Error::Timeout` when it never ran.
    pub async fn wait(&self, task_id: &str, timeout: Duration) -> Result<Vec<u8>, Error> {
        let task = self.task(task_id).ok_or_else(|| Error::Status {
            code: tonic::Code::NotFound,
            message: format!("no task {task_id}"),
            reason: None,
            status: Box::new(tonic::Status::not_found(format!("no task {task_id}"))),
        })?;
        match task.state {
            TaskState::Succeeded => Ok(task.result),
            s @ (TaskState::Dead | TaskState::Cancelled) => Err(Error::TaskFailed {
                task_id: task.task_id,
                state: s,
                error: task.last_error,
            }),
            state => Err(Error::Timeout {
                task_id: task.task_id,
                waited: timeout,
                state,
            }),
        }
    }

    /// Submits `spec` and returns its result, as `Client::submit_and_wait`.
    pub async fn submit_and_wait(
        &self,
        spec: TaskSpec,
        timeout: Duration,
    ) -> Result<Vec<u8>, Error> {
        let submitted = self.submit(spec).await?;
        self.wait(&submitted.task_id, timeout).await
    }

    /// JSON in, JSON out, as `Client::submit_and_wait_json`.
    pub async fn submit_and_wait_json<T, R>(
        &self,
        queue: impl Into<String>,
        value: &T,
        timeout: Duration,
    ) -> Result<R, Error>
    where
        T: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let bytes = self
            .submit_and_wait(TaskSpec::json(queue, value)?, timeout)
            .await?;
        serde_json::from_slice(&bytes).map_err(Error::Decode)
    }

    /// The task, as the fake broker holds it.
    pub fn task(&self, task_id: &str) -> Option<FakeTask> {
        self.lock_tasks()
            .iter()
            .find(|t| t.task_id == task_id)
            .cloned()
    }

    /// Every task submitted, in order.
    pub fn tasks(&self) -> Vec<FakeTask> {
        self.lock_tasks().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn import(ctx: TaskContext) -> Result<String, TaskError> {
        let done: usize = ctx
            .last_checkpoint()
            .map(|c| String::from_utf8_lossy(&c).parse().unwrap_or(0))
            .unwrap_or(0);
        let rows: usize = String::from_utf8_lossy(ctx.payload())
            .parse()
            .map_err(|_| TaskError::permanent("payload is not a row count"))?;
        for row in done..rows {
            if ctx.is_cancelled() {
                return Err(TaskError::retry("cancelled"));
            }
            ctx.checkpoint((row + 1).to_string()).await?;
        }
        if ctx.metadata().get("flaky").is_some() && ctx.attempt() < 2 {
            return Err(TaskError::retry_after(
                "upstream busy",
                Duration::from_secs(5),
            ));
        }
        Ok(format!("{rows} rows from {}", done))
    }

    #[tokio::test]
    async fn a_handler_runs_on_a_test_context_with_no_broker() {
        let t = TestContext::builder("imports", b"3".to_vec())
            .attempt(2)
            .checkpoint(b"1".to_vec())
            .build();
        assert_eq!(t.context().attempt(), 2);
        assert_eq!(
            t.run(import).await,
            TestOutcome::Completed(b"3 rows from 1".to_vec())
        );
        assert_eq!(t.checkpoints(), vec![b"2".to_vec(), b"3".to_vec()]);
        assert_eq!(t.cancel_checks(), 2);
        assert_eq!(t.context().last_checkpoint(), Some(b"3".to_vec()));

        let t = TestContext::builder("imports", b"1".to_vec())
            .metadata("flaky", "yes")
            .build();
        assert_eq!(
            t.run(import).await,
            TestOutcome::Failed {
                message: "upstream busy".into(),
                retryable: true,
                retry_after: Some(Duration::from_secs(5)),
                cooldown: None,
            }
        );

        let t = TestContext::new("imports", b"many".to_vec());
        assert!(t.run(import).await.is_permanent_failure());
        assert_eq!(
            t.outcome().as_ref().map(TestOutcome::is_permanent_failure),
            Some(true)
        );

        let t = TestContext::builder("imports", b"5".to_vec())
            .cancel_at_checkpoint(2)
            .build();
        assert!(t.run(import).await.is_retryable_failure());
        assert_eq!(t.checkpoints().len(), 2);
        assert_eq!(
            t.context().cancel_reason(),
            Some(CancelReason::CancelRequested)
        );

        let t = TestContext::builder("imports", b"5".to_vec())
            .lose_lease_at_checkpoint(1)
            .build();
        t.run(import).await;
        assert!(t.checkpoints().is_empty());

        let t = TestContext::new("imports", b"5".to_vec());
        t.cancel(CancelReason::ShuttingDown);
        assert!(t.run(import).await.is_retryable_failure());
        assert_eq!(
            t.context().cancel_reason(),
            Some(CancelReason::ShuttingDown)
        );

        let t = TestContext::new("imports", Vec::new());
        let out = t
            .run(|_ctx: TaskContext| async move {
                if true {
                    panic!("boom");
                }
                Ok(())
            })
            .await;
        assert_eq!(
            out,
            TestOutcome::Failed {
                message: "panic: boom".into(),
                retryable: true,
                retry_after: None,
                cooldown: None,
            }
        );
    }

    #[tokio::test]
    async fn a_producer_and_a_worker_run_on_the_fake_broker() {
        let seen = Arc::new(AtomicUsize::new(0));
        let counted = seen.clone();
        let broker = FakeBroker::new()
            .middleware(move |ctx, next: Next| {
                counted.fetch_add(1, Ordering::SeqCst);
                next.run(ctx)
            })
            .queue("imports", import)
            .queue_json("double", |_ctx, n: i64| async move { Ok(n * 2) });

        let out = broker
            .submit_and_wait(
                TaskSpec::new("imports", b"2".to_vec()).metadata("flaky", "yes"),
                Duration::from_secs(1),
            )
            .await
            .unwrap();
        // The first attempt failed after its checkpoints; the retry resumed from them.
        assert_eq!(out, b"2 rows from 2");
        let task = &broker.tasks()[0];
        assert_eq!(task.attempts, 2);
        assert_eq!(task.state, TaskState::Succeeded);
        assert_eq!(
            seen.load(Ordering::SeqCst),
            2,
            "the middleware ran around both attempts"
        );

        let n: i64 = broker
            .submit_and_wait_json("double", &21, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(n, 42);

        // A permanent error: one attempt, DEAD.
        let s = broker
            .submit(TaskSpec::new("imports", b"x".to_vec()))
            .await
            .unwrap();
        let e = broker
            .wait(&s.task_id, Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::TaskFailed {
                    state: TaskState::Dead,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(broker.task(&s.task_id).unwrap().attempts, 1);

        // Retryable errors until max_attempts run out.
        let broker = broker.queue("flaky", |_ctx| async {
            Err::<(), _>(TaskError::retry("down"))
        });
        let s = broker
            .submit(TaskSpec::new("flaky", Vec::new()).max_attempts(4))
            .await
            .unwrap();
        let task = broker.task(&s.task_id).unwrap();
        assert_eq!(
            (task.attempts, task.state, task.last_error.as_str()),
            (4, TaskState::Dead, "down")
        );

        // Same key, same task.
        let a = broker
            .submit(TaskSpec::new("double", b"1".to_vec()).key("k"))
            .await
            .unwrap();
        let b = broker
            .submit(TaskSpec::new("double", b"1".to_vec()).key("k"))
            .await
            .unwrap();
        assert!(b.deduplicated && a.task_id == b.task_id);

        // No handler: the task waits.
        let s = broker
            .submit(TaskSpec::new("nobody", Vec::new()))
            .await
            .unwrap();
        let e = broker
            .wait(&s.task_id, Duration::from_millis(1))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
    }

    #[tokio::test]
    async fn the_outcome_records_the_cooldown_a_handler_asks_for() {
        let t = TestContext::new("mail", b"x".to_vec());
        let outcome = t
            .run(|_ctx: TaskContext| async move {
                Err::<Vec<u8>, _>(
                    TaskError::retry("429 from the provider")
                        .cool_down_key(Duration::from_secs(90)),
                )
            })
            .await;
        let TestOutcome::Failed { cooldown, .. } = outcome else {
            panic!("{outcome:?}");
        };
        assert_eq!(
            cooldown,
            Some((
                crate::pb::CooldownScope::ConcurrencyKey,
                Duration::from_secs(90)
            ))
        );
    }
}
