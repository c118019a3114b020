//! What the chart relies on: the HTTP probes on the metrics port (`/healthz`,
//! `/readyz`, which meshes pass where they block gRPC probes) and the
//! `taskbroker smoke` command that `helm test` runs, with tokens and with mTLS.

mod common;

use std::process::Output;

use common::*;
use taskbroker_server::api::auth::{Role, TokenEntry};
use taskbroker_server::app::TlsOptions;
use tokio::process::Command;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// `GET path` on the HTTP port: (status code, body).
async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {out}"));
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (code, body.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_probes_report_liveness_and_readiness_and_readiness_drops_on_drain() {
    let app = spawn_app_with(
        Backend::Sqlite,
        Options {
            metrics: true,
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let http = app.metrics_addr.expect("metrics port");
    assert_eq!(http_get(http, "/healthz").await.0, 200);
    assert_eq!(
        http_get(http, "/readyz").await,
        (200, "ready\n".to_string())
    );

    // Draining (what SIGTERM starts): not ready, still alive.
    app.app.as_ref().unwrap().broker.dispatcher().drain();
    assert_eq!(
        http_get(http, "/readyz").await,
        (503, "draining\n".to_string())
    );
    assert_eq!(http_get(http, "/healthz").await.0, 200);
    assert_eq!(http_get(http, "/nope").await.0, 404);
    app.shutdown().await;
}

/// Waits (bounded) until grpc.health reports `want` for service "readiness".
async fn grpc_readiness(app: &TestApp, want: ServingStatus) {
    let channel = tonic::transport::Channel::from_shared(app.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = HealthClient::new(channel);
    let mut stream = h
        .watch(HealthCheckRequest {
            service: "readiness".into(),
        })
        .await
        .unwrap()
        .into_inner();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_says_what_grpc_readiness_says_while_the_database_is_away() {
    let Some(db) = test_db(Backend::Postgres).await else {
        return;
    };
    let db = std::sync::Arc::new(db);
    let app = spawn_on(
        db.clone(),
        Options {
            metrics: true,
            ..Options::default()
        },
    )
    .await;
    let http = app.metrics_addr.unwrap();
    grpc_readiness(&app, ServingStatus::Serving).await;
    assert_eq!(http_get(http, "/readyz").await.0, 200);

    // No connections to the broker's database for a while.
    let admin_url = postgres_admin_url().unwrap();
    let name = db.url.rsplit('/').next().unwrap().to_string();
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin_url)
        .await
        .unwrap();
    let allow = |on: bool| format!("ALTER DATABASE {name} ALLOW_CONNECTIONS {on}");
    sqlx::query(sqlx::AssertSqlSafe(allow(false)))
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
        .bind(&name)
        .execute(&mut conn)
        .await
        .unwrap();
    grpc_readiness(&app, ServingStatus::NotServing).await;
    assert_eq!(
        http_get(http, "/readyz").await,
        (503, "database unreachable\n".to_string())
    );
    assert_eq!(http_get(http, "/healthz").await.0, 200, "alive all along");

    sqlx::query(sqlx::AssertSqlSafe(allow(true)))
        .execute(&mut conn)
        .await
        .unwrap();
    grpc_readiness(&app, ServingStatus::Serving).await;
    assert_eq!(http_get(http, "/readyz").await.0, 200);
    app.shutdown().await;
}

async fn smoke(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_taskbroker"))
        .arg("smoke")
        .args(args)
        .env_remove("TASKBROKER_ADDR")
        .env_remove("TASKBROKER_TOKEN")
        .env_remove("TASKBROKER_AUTH_TOKENS_FILE")
        .output()
        .await
        .expect("the binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn token(role: Role, token: &str) -> TokenEntry {
    TokenEntry {
        role,
        token: token.into(),
        name: None,
        workers: None,
        queues: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke_submits_leases_and_completes_with_tokens_from_the_broker_token_file() {
    let app = spawn_app_with(
        Backend::Sqlite,
        Options {
            auth: vec![
                token(Role::Producer, "p-secret"),
                token(Role::Worker, "w-secret"),
            ],
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(&file, "producer p-secret\nworker w-secret\n").unwrap();
    let file = file.to_str().unwrap();

    let out = smoke(&["--addr", &app.url(), "--tokens-file", file]).await;
    assert!(out.status.success(), "smoke failed: {}", text(&out.stderr));
    let report = text(&out.stdout);
    assert!(report.contains("readiness: SERVING"), "{report}");
    assert!(report.ends_with("smoke test passed\n"), "{report}");
    // The task it reported really ran to the end.
    let id = report
        .lines()
        .find_map(|l| l.strip_prefix("complete: task "))
        .expect("a completed task id");
    let task = app
        .app
        .as_ref()
        .unwrap()
        .broker
        .get_task(id)
        .await
        .expect("the smoke task exists");
    assert_eq!(
        task.result.as_deref(),
        Some(&b"ok"[..]),
        "completed with its result"
    );
    assert!(task.finished_at.is_some());

    // A producer token cannot lease: the command fails with one line naming the step.
    let out = smoke(&["--addr", &app.url(), "--token", "p-secret"]).await;
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("lease: PERMISSION_DENIED"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");

    // No token at all.
    let out = smoke(&["--addr", &app.url()]).await;
    assert!(text(&out.stderr).contains("submit: UNAUTHENTICATED"));
    app.shutdown().await;
}

/// The smoke command leases as `smoke-...`: it skips a worker token bound to other
/// worker ids and takes an unbound one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke_skips_worker_tokens_bound_to_worker_ids() {
    let tokens = "producer p-secret\nworker w-bound per-user workers=uid_5\nworker w-secret\n";
    let app = spawn_app_with(
        Backend::Sqlite,
        Options {
            auth: taskbroker_server::api::auth::parse_token_file(tokens).unwrap(),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(&file, tokens).unwrap();
    let out = smoke(&[
        "--addr",
        &app.url(),
        "--tokens-file",
        file.to_str().unwrap(),
    ])
    .await;
    assert!(out.status.success(), "smoke failed: {}", text(&out.stderr));
    assert!(text(&out.stdout).ends_with("smoke test passed\n"));
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke_speaks_tls_with_a_client_certificate() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let leaf = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf("taskbroker.tasks.svc");
    let (client_cert, client_key) = leaf("helm-test");
    let app = spawn_app_with(
        Backend::Sqlite,
        Options {
            tls: Some(TlsOptions {
                cert_pem: server_cert.into_bytes(),
                key_pem: server_key.into_bytes(),
                client_ca_pem: Some(ca.pem().into_bytes()),
            }),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p.to_str().unwrap().to_string()
    };
    let ca_file = write("ca.crt", &ca.pem());
    let cert_file = write("tls.crt", &client_cert);
    let key_file = write("tls.key", &client_key);
    let addr = format!("127.0.0.1:{}", app.addr.port());
    let base = [
        "--addr",
        &addr,
        "--tls-ca",
        &ca_file,
        "--tls-domain",
        "taskbroker.tasks.svc",
    ];

    let out = smoke(
        &[
            &base[..],
            &["--tls-cert", &cert_file, "--tls-key", &key_file],
        ]
        .concat(),
    )
    .await;
    assert!(out.status.success(), "smoke failed: {}", text(&out.stderr));
    assert!(text(&out.stdout).ends_with("smoke test passed\n"));

    // Without the client certificate the broker refuses the connection.
    let out = smoke(&base).await;
    assert!(!out.status.success());
    app.shutdown().await;
}
