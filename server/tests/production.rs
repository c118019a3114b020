//! The broker as a service: health, reflection, metrics, load shedding, message
//! limits, authentication, TLS, configuration errors and SIGTERM.

mod common;

use common::*;

use taskbroker_client::pb;

use taskbroker_client::pb::broker_service_client::BrokerServiceClient;

use taskbroker_server::api::auth::{Role, TokenEntry};

use taskbroker_server::app::{ServerOptions, TlsOptions};

use tonic::Code;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

use tonic_health::pb::HealthCheckRequest;

use tonic_health::pb::health_check_response::ServingStatus;

use tonic_health::pb::health_client::HealthClient;

async fn channel(url: &str) -> Channel {
    Channel::from_shared(url.to_string())
        .unwrap()
        .connect()
        .await
        .unwrap()
}

fn code<T>(r: Result<T, tonic::Status>) -> Code {
    r.err().map_or(Code::Ok, |s| s.code())
}

async fn readiness(addr: &str) -> tonic::Streaming<tonic_health::pb::HealthCheckResponse> {
    let mut h = HealthClient::new(channel(addr).await);
    h.watch(HealthCheckRequest {
        service: "readiness".into(),
    })
    .await
    .unwrap()
    .into_inner()
}

/// Reads the watch stream until it reports `want`.
async fn until(
    stream: &mut tonic::Streaming<tonic_health::pb::HealthCheckResponse>,
    want: ServingStatus,
) {
    let reached = async {
        while let Some(r) = stream.message().await.unwrap() {
            if r.status == want as i32 {
                return;
            }
        }
        panic!("health stream ended before {want:?}");
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), reached)
        .await
        .unwrap_or_else(|_| panic!("health never reported {want:?}"));
}

async fn scrape(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out
}

fn token(role: Role, token: &str, name: &str) -> TokenEntry {
    TokenEntry {
        role,
        token: token.into(),
        name: Some(name.into()),
        workers: None,
        queues: None,
    }
}

// Readiness, reflection, the metrics, and load shedding.
#[path = "production/health_and_metrics.rs"]
mod health_and_metrics;
// Auth: producer keys, the role and method matrix, and TLS client certificates.
#[path = "production/auth.rs"]
mod auth;
// The broker process: bad configuration, SIGTERM and an unreachable database.
#[path = "production/process.rs"]
mod process;
