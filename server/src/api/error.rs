//! The one table from service errors to gRPC statuses. Database text never
//! reaches a client; the detail goes to the log, once, here.

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::domain::validate::Invalid;
use crate::service::ServiceError;

/// The `google.rpc.ErrorInfo` domain of this broker's errors.
pub const DOMAIN: &str = "taskbroker.dev";

pub fn invalid(e: Invalid) -> Status {
    let code = if e.too_large {
        Code::ResourceExhausted
    } else {
        Code::InvalidArgument
    };
    let details = ErrorDetails::with_bad_request_violation(e.field.clone(), e.message.clone());
    Status::with_error_details(code, e.to_string(), details)
}

pub fn status(e: ServiceError) -> Status {
    match e {
        ServiceError::Invalid(i) => invalid(i),
        ServiceError::OutOfRange(i) => {
            let details =
                ErrorDetails::with_bad_request_violation(i.field.clone(), i.message.clone());
            Status::with_error_details(Code::OutOfRange, i.to_string(), details)
        }
        ServiceError::NotFound { .. } => Status::not_found(e.to_string()),
        ServiceError::LeaseLost { ref task_id } => {
            let details = ErrorDetails::with_error_info(
                "LEASE_LOST",
                DOMAIN,
                [("task_id".to_string(), task_id.clone())],
            );
            Status::with_error_details(Code::Aborted, e.to_string(), details)
        }
        ServiceError::AlreadyExists { .. } => Status::already_exists(e.to_string()),
        ServiceError::PermissionDenied { .. } => Status::permission_denied(e.to_string()),
        ServiceError::FailedPrecondition(m) => Status::failed_precondition(m),
        ServiceError::Unavailable(ref source) => {
            tracing::warn!(error = %source, cause = ?std::error::Error::source(source), "database unavailable");
            Status::unavailable("database unavailable, retry later")
        }
        ServiceError::QueueFull {
            ref queue,
            limit,
            retry_after,
            ..
        } => {
            let mut details = ErrorDetails::new();
            if let Some(after) = retry_after {
                details.set_retry_info(Some(after));
            }
            details.add_quota_failure_violation(
                format!("queue:{queue}"),
                format!("the queue's {limit} is reached"),
            );
            Status::with_error_details(Code::ResourceExhausted, e.to_string(), details)
        }
        ServiceError::DeadlineExceeded => Status::deadline_exceeded(e.to_string()),
        ServiceError::Draining => Status::unavailable("broker is shutting down"),
        ServiceError::Internal(ref source) => {
            tracing::error!(error = %source, cause = ?std::error::Error::source(source), "internal error");
            Status::internal("internal error")
        }
    }
}
