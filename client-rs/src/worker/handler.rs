//! What a handler returns: a result (`TaskOutput`) or a `TaskError` that says
//! whether and when the task should be retried.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde::Serialize;

use super::TaskContext;

/// A boxed error, as `TaskError`'s constructors accept.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failed attempt. Any `std::error::Error` converts into a retryable one, so `?`
/// works in handlers; use the constructors to say more.
pub struct TaskError {
    message: String,
    retryable: bool,
    retry_after: Option<Duration>,
    /// Ask for the retry to be reserved for this worker (routing).
    prefer_same_worker: bool,
    /// Hold the task's concurrency key or bucket this long (`FailRequest.cooldown`).
    cooldown: Option<(crate::pb::CooldownScope, Duration)>,
    /// A result the runtime cannot store (a programming error): logged at ERROR.
    pub(crate) unstorable: bool,
    /// The error it was made from, for a policy's non-retryable types.
    source: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

/// The error's text followed by its sources: `outer: inner: root`.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    message
}

impl TaskError {
    /// Retry according to the task's retry policy (until its attempts run out).
    pub fn retry(e: impl Into<BoxError>) -> Self {
        let e = e.into();
        TaskError {
            message: chain(e.as_ref()),
            retryable: true,
            retry_after: None,
            prefer_same_worker: false,
            cooldown: None,
            unstorable: false,
            source: Some(Arc::from(e)),
        }
    }

    /// Do not retry: the task goes DEAD with this error.
    pub fn permanent(e: impl Into<BoxError>) -> Self {
        TaskError {
            retryable: false,
            ..TaskError::retry(e)
        }
    }

    /// Retry no sooner than `after`, instead of the policy's backoff (for example
    /// what a rate-limited API asked for).
    pub fn retry_after(e: impl Into<BoxError>, after: Duration) -> Self {
        TaskError {
            retry_after: Some(after),
            ..TaskError::retry(e)
        }
    }

    /// The message stored as the task's `last_error`.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// The error this one was made from (`TaskError::retry(e)`, `?`), if any.
    pub fn error(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }

    /// The same failure, not retried.
    pub(crate) fn into_permanent(self) -> Self {
        TaskError {
            retryable: false,
            retry_after: None,
            ..self
        }
    }

    /// The backoff asked for by `retry_after`, if any.
    pub fn retry_delay(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Asks the broker to keep the retry for this worker (its local files are
    /// here): `FailRequest.prefer_same_worker`. SOFT unless the task's own sticky
    /// policy says otherwise.
    pub fn prefer_same_worker(mut self) -> Self {
        self.prefer_same_worker = true;
        self
    }

    /// Holds every task of this task's concurrency key (in its queue) for
    /// `duration`, on every replica, e.g. from a 429's `Retry-After`; its own
    /// retry waits at least as long. `FailRequest.cooldown` with scope
    /// CONCURRENCY_KEY: the broker refuses it (INVALID_ARGUMENT) when the task has
    /// no key or `duration` is above its `max_cooldown`.
    pub fn cool_down_key(mut self, duration: Duration) -> Self {
        self.cooldown = Some((crate::pb::CooldownScope::ConcurrencyKey, duration));
        self
    }

    /// As [`TaskError::cool_down_key`], for the task's limit bucket.
    pub fn cool_down_bucket(mut self, duration: Duration) -> Self {
        self.cooldown = Some((crate::pb::CooldownScope::Bucket, duration));
        self
    }

    /// The cooldown asked for, if any.
    pub fn cooldown(&self) -> Option<(crate::pb::CooldownScope, Duration)> {
        self.cooldown
    }

    /// Whether [`TaskError::prefer_same_worker`] was asked for.
    pub fn prefers_same_worker(&self) -> bool {
        self.prefer_same_worker
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for TaskError {
    fn from(e: E) -> Self {
        TaskError::retry(e)
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskError")
            .field("message", &self.message)
            .field("retryable", &self.retryable)
            .field("retry_after", &self.retry_after)
            .finish()
    }
}

/// What a handler may return on success; it becomes the task's result bytes.
pub trait TaskOutput {
    fn into_result(self) -> Result<Vec<u8>, TaskError>;
}

impl TaskOutput for Vec<u8> {
    fn into_result(self) -> Result<Vec<u8>, TaskError> {
        Ok(self)
    }
}

impl TaskOutput for String {
    fn into_result(self) -> Result<Vec<u8>, TaskError> {
        Ok(self.into_bytes())
    }
}

impl TaskOutput for &'static str {
    fn into_result(self) -> Result<Vec<u8>, TaskError> {
        Ok(self.as_bytes().to_vec())
    }
}

impl TaskOutput for () {
    fn into_result(self) -> Result<Vec<u8>, TaskError> {
        Ok(Vec::new())
    }
}

/// A result stored as JSON: `Ok(Json(value))`. Read it back with
/// `Client::submit_and_wait_json` or `serde_json::from_slice`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Json<T>(pub T);

/// A value that does not encode (a map whose keys are not strings) fails the attempt at
/// once with the reason, under the task's normal retry policy: a programming error, like
/// an error the handler returns (docs/client-spec.md point 11).
impl<T: Serialize> TaskOutput for Json<T> {
    fn into_result(self) -> Result<Vec<u8>, TaskError> {
        serde_json::to_vec(&self.0).map_err(|e| TaskError {
            unstorable: true,
            ..TaskError::retry(format!("cannot encode the result as JSON: {e}"))
        })
    }
}

/// A handler with its output type erased.
pub(crate) type BoxHandler =
    Arc<dyn Fn(TaskContext) -> BoxFuture<'static, Result<Vec<u8>, TaskError>> + Send + Sync>;

pub(crate) fn boxed<H, Fut, O>(handler: H) -> BoxHandler
where
    H: Fn(TaskContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, TaskError>> + Send + 'static,
    O: TaskOutput,
{
    Arc::new(move |ctx| {
        handler(ctx)
            .map(|r| r.and_then(TaskOutput::into_result))
            .boxed()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn constructors_say_whether_to_retry() {
        let e = TaskError::retry("flaky");
        assert!(e.is_retryable() && e.retry_delay().is_none());
        assert_eq!(e.message(), "flaky");
        let e = TaskError::permanent(String::from("bad input"));
        assert!(!e.is_retryable());
        let e = TaskError::retry_after("slow down", Duration::from_secs(7));
        assert!(e.is_retryable());
        assert_eq!(e.retry_delay(), Some(Duration::from_secs(7)));
    }

    #[test]
    fn question_mark_keeps_the_cause_chain() {
        fn op() -> Result<(), TaskError> {
            Err(Outer(std::io::Error::other("disk full")))?
        }
        let e = op().unwrap_err();
        assert!(e.is_retryable());
        assert_eq!(e.message(), "outer: disk full");
    }

    #[test]
    fn outputs_become_bytes() {
        assert_eq!("hi".into_result().unwrap(), b"hi");
        assert_eq!(().into_result().unwrap(), b"");
        assert_eq!(
            Json(serde_json::json!({"n": 1})).into_result().unwrap(),
            br#"{"n":1}"#
        );
    }

    #[test]
    fn a_result_that_does_not_encode_fails_the_attempt_under_the_retry_policy() {
        let m = std::collections::HashMap::from([((1_u8, 2_u8), 3_u8)]);
        let e = Json(m).into_result().unwrap_err();
        assert!(e.is_retryable());
        assert!(
            e.message().contains("key must be a string"),
            "{}",
            e.message()
        );
    }
}
