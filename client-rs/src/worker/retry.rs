//! Backoff between failed calls, and the Lease errors that stop a worker.

use std::time::Duration;

use super::defaults;
use crate::Error;

/// The longest pause after `failures` failed calls in a row (0 = the first):
/// `min(BACKOFF_MAX, BACKOFF_BASE * 2^failures)`.
pub fn backoff_ceiling(failures: u32) -> Duration {
    backoff_bounded(failures, defaults::BACKOFF_BASE, defaults::BACKOFF_MAX)
}

/// Exponential backoff with full jitter: a random pause in `[0.1, 1] x
/// backoff_ceiling(failures)`. Spreads reconnecting workers out instead of having them
/// retry in step.
pub fn backoff_delay(failures: u32) -> Duration {
    backoff(failures, defaults::BACKOFF_BASE, defaults::BACKOFF_MAX)
}

fn backoff_bounded(attempt: u32, base: Duration, max: Duration) -> Duration {
    base.saturating_mul(1u32 << attempt.min(16)).min(max)
}

pub(crate) fn backoff(attempt: u32, base: Duration, max: Duration) -> Duration {
    backoff_bounded(attempt, base, max).mul_f64(rand::random::<f64>().max(0.1))
}

/// Whether a failed call says the client's configuration cannot work against that
/// address: TLS on one side only or refused, or an answer that is not gRPC. A
/// refused connection or a timeout is not (the broker may still be starting).
pub fn misconfigured(e: &Error) -> bool {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    let text = text.to_ascii_lowercase();
    [
        "tls",
        "certificate",
        "handshake",
        "invalidcontenttype",
        "corrupt message",
        "protocol error",
        "frame with invalid size",
        "http2 error",
        "broken pipe",
        "connection reset",
    ]
    .iter()
    .any(|needle| text.contains(needle))
        && !text.contains("connection refused")
}

/// Errors that retrying the same Lease cannot fix, so they stop the worker (spec point
/// 5): UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT, UNIMPLEMENTED, and an
/// answer that is not gRPC at all (the broker's HTTP port, another HTTP server): tonic
/// reads its body as gRPC frames and fails with INTERNAL "protocol error: ...".
pub fn stops_worker(e: &Error) -> bool {
    use tonic::Code;
    match e.code() {
        Some(
            Code::InvalidArgument
            | Code::Unauthenticated
            | Code::PermissionDenied
            | Code::Unimplemented,
        ) => true,
        Some(Code::Internal | Code::Unknown) => not_grpc(e),
        _ => false,
    }
}

/// Whether a status was made by tonic from an answer that is not gRPC (no broker
/// writes these messages).
fn not_grpc(e: &Error) -> bool {
    e.status()
        .is_some_and(|s| s.message().starts_with("protocol error:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_backoff_doubles_from_200ms_to_a_10s_ceiling_with_jitter() {
        assert_eq!(backoff_ceiling(0), Duration::from_millis(200));
        assert_eq!(backoff_ceiling(3), Duration::from_millis(1600));
        assert_eq!(backoff_ceiling(10), Duration::from_secs(10));
        assert_eq!(backoff_ceiling(u32::MAX), Duration::from_secs(10));
        let draws: Vec<Duration> = (0..50).map(|_| backoff_delay(3)).collect();
        assert!(draws.iter().all(|d| *d >= Duration::from_millis(160)));
        assert!(draws.iter().any(|d| *d != draws[0]), "no jitter: {draws:?}");
    }

    #[test]
    fn only_the_four_unfixable_codes_stop_a_worker() {
        use tonic::Code;
        for (code, stops) in [
            (Code::Unauthenticated, true),
            (Code::PermissionDenied, true),
            (Code::InvalidArgument, true),
            (Code::Unimplemented, true),
            (Code::Unavailable, false),
            (Code::OutOfRange, false),
            (Code::Aborted, false),
            (Code::Internal, false),
        ] {
            let e = Error::from(tonic::Status::new(code, "x"));
            assert_eq!(stops_worker(&e), stops, "{code:?}");
        }
    }

    #[test]
    fn an_answer_that_is_not_grpc_stops_a_worker() {
        // What tonic makes of an HTTP server's 403 page read as gRPC frames.
        let e = Error::from(tonic::Status::internal(
            "protocol error: received message with invalid compression flag: 60 (valid flags are 0 and 1) while receiving response with status: 403 Forbidden",
        ));
        assert!(stops_worker(&e));
        // INTERNAL from the broker itself is retried.
        let e = Error::from(tonic::Status::internal("database is locked"));
        assert!(!stops_worker(&e));
    }

    #[test]
    fn backoff_is_bounded_and_never_zero() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(5);
        for attempt in 0..100 {
            let d = backoff(attempt, base, max);
            assert!(d <= max, "{attempt}: {d:?}");
            assert!(d >= base.min(max).mul_f64(0.1) / 2, "{attempt}: {d:?}");
        }
    }
}
