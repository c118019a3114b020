//! [`TaskDef`]: a queue tied to its payload and result types, shared by the producer
//! (typed submit, submit-and-wait, delays) and the worker ([`crate::worker::WorkerBuilder::task`]).

use std::fmt;
use std::marker::PhantomData;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{Client, Error, QueuePolicy, Submitted, TaskSpec};

/// The tasks of one queue, whose payload is the JSON of a `P` and result the JSON of
/// an `R`.
///
/// ```no_run
/// use std::time::Duration;
/// use serde::{Deserialize, Serialize};
/// use taskbroker_client::{Client, QueuePolicy, TaskContext, TaskDef, TaskError, Worker};
///
/// #[derive(Serialize, Deserialize)]
/// struct Email { to: String }
/// #[derive(Serialize, Deserialize)]
/// struct Sent { id: String }
///
/// # async fn demo(client: Client) -> Result<(), taskbroker_client::Error> {
/// let emails: TaskDef<Email, Sent> =
///     TaskDef::new("emails").policy(QueuePolicy::new().max_attempts(5));
/// let sent = emails
///     .submit_and_wait(&client, &Email { to: "a@b.c".into() }, Duration::from_secs(30))
///     .await?;
/// emails.submit_in(&client, &Email { to: "d@e.f".into() }, Duration::from_secs(60)).await?;
///
/// let worker = Worker::builder(client)
///     .task(&emails, |_ctx: TaskContext, e: Email| async move {
///         Ok::<_, TaskError>(Sent { id: e.to })
///     })
///     .build();
/// # Ok(()) }
/// ```
pub struct TaskDef<P, R> {
    queue: String,
    policy: Option<QueuePolicy>,
    types: PhantomData<fn(P) -> R>,
}

impl<P, R> Clone for TaskDef<P, R> {
    fn clone(&self) -> Self {
        TaskDef {
            queue: self.queue.clone(),
            policy: self.policy.clone(),
            types: PhantomData,
        }
    }
}

impl<P, R> fmt::Debug for TaskDef<P, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskDef")
            .field("queue", &self.queue)
            .field("policy", &self.policy)
            .finish()
    }
}

impl<P, R> TaskDef<P, R> {
    pub fn new(queue: impl Into<String>) -> Self {
        TaskDef {
            queue: queue.into(),
            policy: None,
            types: PhantomData,
        }
    }

    /// The queue's policy: its retry defaults fill every spec this definition makes,
    /// and a worker registering it with `task` applies the rest.
    pub fn policy(mut self, policy: QueuePolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    pub fn queue(&self) -> &str {
        &self.queue
    }

    pub fn queue_policy(&self) -> Option<&QueuePolicy> {
        self.policy.as_ref()
    }
}

impl<P: Serialize, R: DeserializeOwned> TaskDef<P, R> {
    /// A spec of this queue carrying `payload` as JSON, to set more on
    /// (`key`, `priority`, its own retry) before `Client::submit`.
    pub fn spec(&self, payload: &P) -> Result<TaskSpec, Error> {
        let spec = TaskSpec::json(self.queue.clone(), payload)?;
        Ok(match &self.policy {
            Some(p) => {
                let mut inner = spec.into_proto();
                p.fill(&mut inner);
                inner.into()
            }
            None => spec,
        })
    }

    pub async fn submit(&self, client: &Client, payload: &P) -> Result<Submitted, Error> {
        client.submit(self.spec(payload)?).await
    }

    /// Submits a task not leased before `delay` from now.
    pub async fn submit_in(
        &self,
        client: &Client,
        payload: &P,
        delay: Duration,
    ) -> Result<Submitted, Error> {
        client.submit(self.spec(payload)?.run_in(delay)).await
    }

    /// Submits a task not leased before `at`.
    pub async fn submit_at(
        &self,
        client: &Client,
        payload: &P,
        at: impl Into<SystemTime>,
    ) -> Result<Submitted, Error> {
        client.submit(self.spec(payload)?.run_at(at)).await
    }

    /// Submits and waits up to `timeout` for the decoded result; DEAD or CANCELLED give
    /// `Error::TaskFailed`, as [`Client::wait`].
    pub async fn submit_and_wait(
        &self,
        client: &Client,
        payload: &P,
        timeout: Duration,
    ) -> Result<R, Error> {
        let submitted = self.submit(client, payload).await?;
        self.wait(client, &submitted.task_id, timeout).await
    }

    /// Waits for a task of this definition and decodes its result.
    pub async fn wait(
        &self,
        client: &Client,
        task_id: &str,
        timeout: Duration,
    ) -> Result<R, Error> {
        let bytes = client.wait(task_id, timeout).await?;
        serde_json::from_slice(&bytes).map_err(Error::Decode)
    }
}
