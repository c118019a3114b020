//! The tower layer in front of every gRPC call: authentication, load shedding
//! (a global concurrency limit that answers RESOURCE_EXHAUSTED at once instead of
//! queueing), a per-request timeout that knows Lease long-polls, and RPC metrics.

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::Semaphore;
use tonic::Status;
use tonic::body::Body;
use tower::{Layer, Service};

use super::auth::Authenticator;
use crate::metrics::Metrics;

pub struct GuardConfig {
    /// Calls running at once, long-polls included, before new ones are shed.
    pub max_concurrent: usize,
    /// Time a call may take; Lease gets `lease_timeout` instead.
    pub request_timeout: Duration,
    pub lease_timeout: Duration,
    pub auth: Option<Authenticator>,
}

#[derive(Clone)]
pub struct GuardLayer {
    state: Arc<State>,
}

struct State {
    permits: Arc<Semaphore>,
    config: GuardConfig,
    metrics: Arc<Metrics>,
}

impl GuardLayer {
    pub fn new(config: GuardConfig, metrics: Arc<Metrics>) -> Self {
        GuardLayer {
            state: Arc::new(State {
                permits: Arc::new(Semaphore::new(config.max_concurrent)),
                config,
                metrics,
            }),
        }
    }
}

impl<S> Layer<S> for GuardLayer {
    type Service = Guard<S>;

    fn layer(&self, inner: S) -> Guard<S> {
        Guard {
            inner,
            state: self.state.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Guard<S> {
    inner: S,
    state: Arc<State>,
}

/// The paths of every method this broker serves (`/taskbroker.v1.BrokerService/Submit`
/// ...), read from its own descriptors: the only values the method label takes
/// besides `unknown`, so calls to made-up paths cannot grow `/metrics`.
static KNOWN_METHODS: LazyLock<HashSet<String>> = LazyLock::new(|| {
    let mut known = HashSet::new();
    for descriptor in [super::DESCRIPTOR, super::KEDA_DESCRIPTOR] {
        let set: prost_types::FileDescriptorSet =
            prost::Message::decode(descriptor).unwrap_or_default();
        for f in &set.file {
            for s in &f.service {
                for m in &s.method {
                    known.insert(format!("/{}.{}/{}", f.package(), s.name(), m.name()));
                }
            }
        }
    }
    known
});

/// The method label of a request path.
pub(crate) fn method_label(path: &str) -> &str {
    match KNOWN_METHODS.get(path) {
        Some(known) => known,
        None => "unknown",
    }
}

/// The grpc-status of a response: in the headers for errors (trailers-only), else OK.
fn code_of(resp: &http::Response<Body>) -> tonic::Code {
    resp.headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .map(tonic::Code::from_i32)
        .unwrap_or(tonic::Code::Ok)
}

pub(crate) fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

/// tonic answers a message over the size limit with OUT_OF_RANGE; gRPC's own
/// implementations, and this broker's contract, say RESOURCE_EXHAUSTED.
fn size_limit_code(resp: http::Response<Body>) -> http::Response<Body> {
    let too_large = code_of(&resp) == tonic::Code::OutOfRange
        && resp
            .headers()
            .get("grpc-message")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|m| {
                m.contains("message%20length%20too%20large")
                    || m.contains("message length too large")
            });
    if too_large {
        return Status::resource_exhausted("request message is larger than the broker accepts")
            .into_http();
    }
    resp
}

impl<S> Service<http::Request<Body>> for Guard<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<Body>) -> Self::Future {
        let state = self.state.clone();
        let internal = req.uri().path().starts_with("/grpc.");
        // Metric labels: only this broker's own methods, so arbitrary paths cannot
        // grow the label set.
        let path = method_label(req.uri().path()).to_string();
        let is_lease = path == "/taskbroker.v1.BrokerService/Lease"
            // lease_next: a settle may long-poll for its next tasks.
            || matches!(
                path.as_str(),
                "/taskbroker.v1.BrokerService/Complete"
                    | "/taskbroker.v1.BrokerService/CompleteMany"
                    | "/taskbroker.v1.BrokerService/Fail"
            );
        if let Some(auth) = &state.config.auth {
            match auth.check(req.uri().path(), req.headers()) {
                Ok(Some(principal)) => {
                    req.extensions_mut().insert(principal);
                }
                Ok(None) => {}
                Err(status) => {
                    state
                        .metrics
                        .rpc(&path, code_name(status.code()), Duration::ZERO);
                    return Box::pin(async move { Ok(status.into_http()) });
                }
            }
        }
        // Health checks and reflection are never shed: probes must answer under load.
        let permit = if internal {
            None
        } else {
            match state.permits.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    let status = Status::resource_exhausted(
                        "broker is at its concurrency limit, retry with backoff",
                    );
                    state
                        .metrics
                        .rpc(&path, "RESOURCE_EXHAUSTED", Duration::ZERO);
                    return Box::pin(async move { Ok(status.into_http()) });
                }
            }
        };
        let timeout = if is_lease {
            state.config.lease_timeout
        } else {
            state.config.request_timeout
        };
        // The instant after which a write of this call must not commit: the
        // answer goes out at the broker's timeout or the client's grpc-timeout,
        // whichever is first, and a commit leaves a margin before it.
        let budget = req
            .headers()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(super::convert::parse_grpc_timeout)
            .map_or(timeout, |t| t.min(timeout));
        req.extensions_mut().insert(CommitBy(
            Instant::now() + budget - (budget / 4).min(COMMIT_MARGIN),
        ));
        // The clone is ready only if polled; swap so the polled one serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let span = tracing::info_span!(
            "rpc",
            otel.name = %path.trim_start_matches('/'),
            otel.kind = "server",
            rpc.system = "grpc",
            rpc.grpc.status_code = tracing::field::Empty,
        );
        let _ = tracing_opentelemetry::OpenTelemetrySpanExt::set_parent(
            &span,
            crate::telemetry::parent_from_headers(req.headers()),
        );
        Box::pin(async move {
            let start = Instant::now();
            let call: Pin<Box<_>> = Box::pin(tracing::Instrument::instrument(
                inner.call(req),
                span.clone(),
            ));
            let resp = match tokio::time::timeout(timeout, call).await {
                Ok(r) => size_limit_code(r?),
                Err(_) => {
                    Status::deadline_exceeded("the broker's request timeout passed").into_http()
                }
            };
            drop(permit);
            span.record("rpc.grpc.status_code", code_of(&resp) as i32);
            if !internal {
                state
                    .metrics
                    .rpc(&path, code_name(code_of(&resp)), start.elapsed());
            }
            Ok(resp)
        })
    }
}

/// A write commits at least this long (or a quarter of the call's time, if
/// less) before the call's answer is due.
const COMMIT_MARGIN: Duration = Duration::from_millis(100);

/// The instant after which the call's writes must not commit (a request
/// extension, set for every call).
#[derive(Debug, Clone, Copy)]
pub struct CommitBy(pub Instant);

#[cfg(test)]
mod tests {
    use super::method_label;

    #[test]
    fn only_served_methods_become_labels() {
        assert_eq!(
            method_label("/taskbroker.v1.BrokerService/Lease"),
            "/taskbroker.v1.BrokerService/Lease"
        );
        assert_eq!(
            method_label("/taskbroker.v1.AdminService/ListTasks"),
            "/taskbroker.v1.AdminService/ListTasks"
        );
        assert_eq!(
            method_label("/taskbroker.v1.BrokerService/Made-up-1"),
            "unknown"
        );
        assert_eq!(method_label("/taskbroker.v1.Nope/X"), "unknown");
        assert_eq!(method_label("/elsewhere"), "unknown");
    }
}
