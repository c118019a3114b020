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

// - `mod.rs` (this file): `TestContext`, its builder and `TestOutcome`.
// - `fake.rs`: `FakeBroker` and the `FakeTask`s it ran.
// - `tests.rs`: the unit tests of both.

mod fake;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;

pub use fake::{FakeBroker, FakeTask};

use crate::worker::TaskOutput;
use crate::worker::context::Shared;
use crate::worker::handler::{self, BoxHandler};
use crate::{CancelReason, Client, Error, LEASE_LOST, TaskContext, TaskError, pb};

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

#[cfg(test)]
mod tests;
