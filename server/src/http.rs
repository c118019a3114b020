//! The HTTP side port: Prometheus metrics at `/metrics`, and the web console
//! (`crate::console`) at every other path.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::service::Broker;

async fn metrics(State(broker): State<Arc<Broker>>) -> impl IntoResponse {
    let now = broker.clock().now();
    let stats = match broker.store().queue_stats(&[], now).await {
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
    let body = broker.metrics().render(
        &stats,
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

/// Binds the metrics port and serves until `stop`. `tokens` are the broker's
/// auth tokens, which the console checks (empty: auth off).
pub async fn serve(
    addr: SocketAddr,
    broker: Arc<Broker>,
    tokens: &[crate::api::auth::TokenEntry],
    stop: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let console = crate::console::router(broker.clone(), tokens);
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(broker)
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
