//! [`FakeBroker`]: a producer's calls and a worker's handlers in one process, with no
//! broker: a submit runs its task's attempts at once.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{DEFAULT_MAX_ATTEMPTS, TestContext, TestOutcome, next_task_id};
use crate::worker::handler::{self, BoxHandler};
use crate::worker::middleware::{self, BoxMiddleware};
use crate::worker::{Next, TaskOutput};
use crate::{Error, Submitted, TaskContext, TaskError, TaskSpec, TaskState};

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
