//! The HTTP side port: Prometheus metrics at `/metrics`, the probes `/healthz`
//! (liveness) and `/readyz` (readiness) for meshes that pass only HTTP probes
//! (Linkerd authorizes HTTP probe paths by itself; Istio rewrites HTTP probes through
//! its agent), which say what `grpc.health.v1` says on the gRPC port (service `""`
//! and service `readiness`), and the web console (`crate::console`) at every other path.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::service::Broker;

/// What the last readiness check found of the database (set by the app's monitor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Database {
    /// It answered, and takes writes.
    Up,
    /// It did not answer.
    Unreachable,
    /// It answered as a standby (in recovery): every write would be refused.
    Standby,
}

#[derive(Clone)]
struct HttpState {
    broker: Arc<Broker>,
    database: watch::Receiver<Database>,
    /// The queue depths of the last count (a scrape does not count).
    depth: Arc<crate::depth::DepthCache>,
}

async fn metrics(State(state): State<HttpState>) -> impl IntoResponse {
    let broker = &state.broker;
    let now = broker.clock().now();
    let depth = match state.depth.get(broker).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "metrics: queue stats unavailable");
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "database unavailable\n".to_string(),
            )
                .into_response();
        }
    };
    broker.metrics().depth_age(depth.taken.elapsed());
    broker
        .metrics()
        .notifications(broker.store().notification_stats());
    match broker.store().event_held_since().await {
        Ok(since) => broker.metrics().watch_lag(since, now),
        Err(e) => tracing::warn!(error = %e, "metrics: watch lag unavailable"),
    }
    let body = broker.metrics().render(
        &depth.stats,
        broker.store().pool_stats(),
        broker.dispatcher().waiters(),
        now,
    );
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

/// Liveness: the process answers (as `grpc.health.v1` service `""`).
async fn healthz() -> &'static str {
    "ok\n"
}

/// Readiness: the database answers, is not a standby, and the broker is not draining (as
/// `grpc.health.v1` service `readiness`). 503 takes the pod out of the endpoints
/// without restarting it.
async fn readyz(State(state): State<HttpState>) -> (StatusCode, &'static str) {
    if state.broker.dispatcher().draining().is_cancelled() {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining\n");
    }
    match *state.database.borrow() {
        Database::Up => (StatusCode::OK, "ready\n"),
        Database::Unreachable => (StatusCode::SERVICE_UNAVAILABLE, "database unreachable\n"),
        Database::Standby => (StatusCode::SERVICE_UNAVAILABLE, "database is a standby\n"),
    }
}

/// Binds the HTTP port and serves until `stop`. `database` is the readiness
/// monitor's view of the database; `tokens` are the broker's auth tokens, which the
/// console checks (empty: auth off).
pub async fn serve(
    addr: SocketAddr,
    broker: Arc<Broker>,
    database: watch::Receiver<Database>,
    tokens: &[crate::domain::token::TokenEntry],
    stop: CancellationToken,
    depth_max_age: std::time::Duration,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let console = crate::console::router(broker.clone(), tokens);
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(HttpState {
            broker,
            database,
            depth: crate::depth::DepthCache::new(depth_max_age),
        })
        .merge(console);
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "metrics server failed");
        }
    });
    Ok(local)
}
