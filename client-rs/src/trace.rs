//! Trace context across the queue, as W3C `traceparent`.
//!
//! Every call carries the current span's context in a `traceparent` header, so
//! the broker's spans join the caller's trace; Submit is wrapped in a
//! `send <queue>` span; the broker stores the context with each task, and the
//! worker runs each handler in a `process <queue>` span whose parent is that
//! stored context. Without an OpenTelemetry layer in the subscriber all of this
//! is inert.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The metadata key (and gRPC header) of the trace context.
pub const TRACEPARENT: &str = "traceparent";

/// The W3C traceparent of `span`, when it belongs to an exported trace.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

/// Parses `00-<trace id>-<span id>-<flags>`.
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let mut parts = value.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version != "00" || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    let sc = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        SpanId::from_hex(span).ok()?,
        TraceFlags::new(u8::from_str_radix(flags, 16).ok()?),
        true,
        TraceState::default(),
    );
    sc.is_valid().then_some(sc)
}

/// The traceparent to send and to store with submitted tasks: the current `tracing`
/// span's (with an OpenTelemetry layer), else the current `opentelemetry::Context`'s.
pub fn current_traceparent() -> Option<String> {
    traceparent_of(&tracing::Span::current()).or_else(|| {
        let cx = opentelemetry::Context::current();
        let sc = cx.span().span_context().clone();
        sc.is_valid().then(|| {
            format!(
                "00-{}-{}-{:02x}",
                sc.trace_id(),
                sc.span_id(),
                sc.trace_flags().to_u8()
            )
        })
    })
}

/// The OpenTelemetry context of a task's stored traceparent (empty without one).
pub(crate) fn task_context(
    metadata: &std::collections::HashMap<String, String>,
) -> opentelemetry::Context {
    match metadata.get(TRACEPARENT).and_then(|v| parse_traceparent(v)) {
        Some(sc) => opentelemetry::Context::new().with_remote_span_context(sc),
        None => opentelemetry::Context::new(),
    }
}

/// The span a worker runs a task's handler in: `process <queue>`, a child of the
/// context stored with the task (and so of the producer's trace), with a link to
/// that context as the OpenTelemetry messaging conventions ask of a consumer. Its
/// status is set by [`record_process_error`] when the handler fails.
pub(crate) fn process_span(
    queue: &str,
    task_id: &str,
    attempt: u32,
    metadata: &std::collections::HashMap<String, String>,
) -> tracing::Span {
    let span = tracing::info_span!(
        "process",
        otel.name = %format!("process {queue}"),
        otel.kind = "consumer",
        messaging.system = "taskbroker",
        messaging.operation.type = "process",
        messaging.operation.name = "process",
        messaging.destination.name = %queue,
        messaging.message.id = %task_id,
        taskbroker.attempt = attempt,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        error.type = tracing::field::Empty,
    );
    if let Some(parent) = metadata.get(TRACEPARENT).and_then(|v| parse_traceparent(v)) {
        span.add_link(parent.clone());
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(parent));
    }
    span
}

/// Marks a `process` span failed: status ERROR with the handler's message, and
/// `error.type` (`retryable`, `permanent` or `panic`).
pub(crate) fn record_process_error(span: &tracing::Span, kind: &str, message: &str) {
    span.record("otel.status_code", "ERROR");
    span.record("otel.status_description", message);
    span.record("error.type", kind);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_parse_and_bad_ones_are_ignored() {
        let sc =
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert!(sc.is_sampled());
        assert!(
            parse_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none()
        );
        assert!(parse_traceparent("garbage").is_none());
        assert!(
            parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").is_none()
        );
    }
}
