//! The service's errors. `api::error` maps each to one gRPC status.

use crate::domain::validate::Invalid;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Bad input; nothing was changed.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("{what} {id} not found")]
    NotFound { what: &'static str, id: String },
    /// The lease token holds no lease on the task.
    #[error("lease lost: task {task_id} is not leased with this lease_token")]
    LeaseLost { task_id: String },
    /// The thing exists and belongs to somebody else (the message names the field,
    /// never the other party's ids).
    #[error("{field}: {message}")]
    AlreadyExists { field: String, message: String },
    /// A position past the end of what exists (a cursor beyond the last event);
    /// nothing was changed.
    #[error("{0}")]
    OutOfRange(Invalid),
    /// The caller's token may not do this (the message names the field).
    #[error("{field}: {message}")]
    PermissionDenied { field: String, message: String },
    /// The task's state does not allow the operation.
    #[error("{0}")]
    FailedPrecondition(String),
    /// The database cannot be reached.
    #[error("database unavailable")]
    Unavailable(#[source] StoreError),
    /// The call's deadline passed before its writes committed; they were
    /// rolled back (or never started), so nothing was stored.
    #[error("the call's deadline passed before its tasks were committed; nothing was stored")]
    DeadlineExceeded,
    /// The queue holds as many waiting tasks (or payload bytes) as its
    /// `max_pending` (`max_pending_bytes`) allows; nothing was stored.
    #[error("queue {queue} is full: {what}; retry later")]
    QueueFull {
        queue: String,
        /// `max_pending` or `max_pending_bytes`.
        limit: &'static str,
        what: String,
        /// `None` when the call alone exceeds the limit (retrying cannot help).
        retry_after: Option<std::time::Duration>,
    },
    /// The broker is shutting down.
    #[error("broker is shutting down")]
    Draining,
    #[error("internal error")]
    Internal(#[source] StoreError),
}

impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(_) => ServiceError::Unavailable(e),
            other => ServiceError::Internal(other),
        }
    }
}

impl ServiceError {
    pub fn not_found(id: &str) -> Self {
        ServiceError::NotFound {
            what: "task",
            id: id.to_string(),
        }
    }
}
