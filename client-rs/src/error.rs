//! The client's one error type. A failed call keeps its gRPC status: the code, the
//! message and, when the broker attached a `google.rpc.ErrorInfo`, its reason (for
//! example `LEASE_LOST`), so callers can branch on them without parsing text.

use std::time::Duration;

use tonic::Code;
use tonic_types::StatusExt;

use crate::pb::TaskState;

/// The `google.rpc.ErrorInfo` domain of the broker's errors.
pub const ERROR_DOMAIN: &str = "taskbroker.dev";

/// The `ErrorInfo` reason of a Checkpoint, Complete or Fail whose lease token no longer
/// holds the lease (status `ABORTED`).
pub const LEASE_LOST: &str = "LEASE_LOST";

/// Everything a client call or a wait can end with, other than success. New kinds may
/// be added: match with a `_` arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The address is not a URI tonic accepts.
    #[error("invalid broker address {addr:?}: {source}")]
    InvalidAddress {
        addr: String,
        #[source]
        source: tonic::transport::Error,
    },
    /// No connection within the connect timeout, or the connection was refused.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: tonic::transport::Error,
    },
    /// The broker (or the transport) answered with a non-OK status.
    #[error("{}: {message}", code_name(*.code))]
    Status {
        code: Code,
        message: String,
        /// The `ErrorInfo` reason of domain `taskbroker.dev`, when there is one.
        reason: Option<String>,
        #[source]
        status: Box<tonic::Status>,
    },
    /// A waited-for task ended DEAD or CANCELLED (`wait`, `submit_and_wait`,
    /// `submit_and_wait_json`): the one failure every client raises for it
    /// (docs/client-spec.md point 19).
    #[error("task {task_id} ended {}{}", state_name(*.state), colon_then(error))]
    TaskFailed {
        task_id: String,
        /// `TaskState::Dead` or `TaskState::Cancelled`.
        state: TaskState,
        /// The task's last error: the message of its last failed attempt, or empty.
        error: String,
    },
    /// A wait ran out before the task finished.
    #[error("gave up after {waited:?} waiting for task {task_id} (still {})", state_name(*.state))]
    Timeout {
        task_id: String,
        waited: Duration,
        state: TaskState,
    },
    /// A value could not be encoded as JSON.
    #[error("cannot encode JSON: {0}")]
    Encode(#[source] serde_json::Error),
    /// Bytes (a payload or a result) are not the JSON of the expected type.
    #[error("cannot decode JSON: {0}")]
    Decode(#[source] serde_json::Error),
    /// The broker's answer lacks a field the contract promises.
    #[error("malformed answer from the broker: {0} is missing")]
    Malformed(&'static str),
    /// A worker was built with settings it cannot run with.
    #[error("invalid worker settings: {0}")]
    Config(String),
    /// The TLS settings were refused (an unreadable certificate or key).
    #[error("invalid TLS settings: {0}")]
    Tls(#[source] tonic::transport::Error),
}

impl From<tonic::Status> for Error {
    fn from(status: tonic::Status) -> Self {
        let reason = status
            .get_details_error_info()
            .filter(|info| info.domain == ERROR_DOMAIN)
            .map(|info| info.reason);
        Error::Status {
            code: status.code(),
            message: status.message().to_string(),
            reason,
            status: Box::new(status),
        }
    }
}

impl Error {
    /// The gRPC code, when the error is a status.
    pub fn code(&self) -> Option<Code> {
        match self {
            Error::Status { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The `google.rpc.ErrorInfo` reason, when the broker attached one.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Error::Status { reason, .. } => reason.as_deref(),
            _ => None,
        }
    }

    /// True for `ABORTED` with reason `LEASE_LOST`: the lease is gone, stop working on
    /// the task and report nothing more.
    pub fn is_lease_lost(&self) -> bool {
        self.code() == Some(Code::Aborted) && self.reason() == Some(LEASE_LOST)
    }

    /// The full status, with its details, when the error is a status.
    pub fn status(&self) -> Option<&tonic::Status> {
        match self {
            Error::Status { status, .. } => Some(status),
            _ => None,
        }
    }

    /// True when the same call may succeed if simply tried again later: the broker or
    /// the network was unavailable, or the call ran out of time.
    pub fn is_transient(&self) -> bool {
        matches!(
            self.code(),
            Some(Code::Unavailable | Code::DeadlineExceeded | Code::Unknown | Code::Cancelled)
        )
    }
}

/// The canonical upper-case name of a gRPC code, as in `NOT_FOUND`.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// `": why"`, or nothing when `why` is empty.
fn colon_then(why: &str) -> String {
    if why.is_empty() {
        String::new()
    } else {
        format!(": {why}")
    }
}

/// The short upper-case name of a task state, as in `READY`.
pub fn state_name(state: TaskState) -> &'static str {
    let full = state.as_str_name();
    full.strip_prefix("TASK_STATE_").unwrap_or(full)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_types::ErrorDetails;

    #[test]
    fn lease_lost_is_read_from_error_info() {
        let details = ErrorDetails::with_error_info("LEASE_LOST", ERROR_DOMAIN, []);
        let status = tonic::Status::with_error_details(Code::Aborted, "lease lost", details);
        let e = Error::from(status);
        assert!(e.is_lease_lost());
        assert_eq!(e.to_string(), "ABORTED: lease lost");

        let plain = Error::from(tonic::Status::aborted("something else"));
        assert!(!plain.is_lease_lost());
        let other_domain = Error::from(tonic::Status::with_error_details(
            Code::Aborted,
            "x",
            ErrorDetails::with_error_info("LEASE_LOST", "example.com", []),
        ));
        assert!(
            !other_domain.is_lease_lost(),
            "only the broker's domain counts"
        );
    }

    #[test]
    fn statuses_print_as_one_plain_line() {
        let e = Error::from(tonic::Status::not_found("task x not found"));
        assert_eq!(e.to_string(), "NOT_FOUND: task x not found");
        assert_eq!(e.code(), Some(Code::NotFound));
        assert!(!e.is_transient());
        assert!(Error::from(tonic::Status::unavailable("down")).is_transient());
        assert_eq!(state_name(TaskState::Dead), "DEAD");
    }
}
