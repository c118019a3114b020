//! `WorkerBuilder::fail_fast`: a worker whose connection settings cannot work against
//! the broker (TLS on one side only) returns the error from `run` instead of retrying.

mod common;

use std::time::Duration;

use common::{Backend, Options, spawn_app, spawn_app_with};
use taskbroker_client::tls::{Certificate, ClientTlsConfig};
use taskbroker_client::{Client, TaskContext, TaskError, Worker};
use taskbroker_server::app::TlsOptions;

/// A CA and a server certificate for `localhost` signed by it, as PEM.
fn certificates() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// Runs a fail-fast worker with `client` until it returns (bounded, so a runtime that
/// retries forever fails the test instead of hanging it).
async fn run_fail_fast(client: Client) -> Result<(), taskbroker_client::Error> {
    let w = Worker::builder(client)
        .fail_fast(true)
        .queue("ff", |_ctx: TaskContext| async { Ok::<_, TaskError>(()) })
        .build();
    tokio::time::timeout(Duration::from_secs(60), w.run(std::future::pending()))
        .await
        .expect("a fail-fast worker with a TLS mismatch kept retrying")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_to_a_tls_broker_stops_a_fail_fast_worker() {
    let (_, cert, key) = certificates();
    let app = spawn_app_with(
        Backend::Sqlite,
        Options {
            tls: Some(TlsOptions {
                cert_pem: cert.into_bytes(),
                key_pem: key.into_bytes(),
                client_ca_pem: None,
            }),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let client = Client::builder(format!("127.0.0.1:{}", app.addr.port()))
        .connect_lazy()
        .unwrap();
    let err = run_fail_fast(client).await.unwrap_err();
    assert!(taskbroker_client::worker::misconfigured(&err), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_a_plaintext_broker_stops_a_fail_fast_worker() {
    let (ca, _, _) = certificates();
    let app = spawn_app(Backend::Sqlite).await.unwrap();
    let client = Client::builder(format!("https://localhost:{}", app.addr.port()))
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca))
                .domain_name("localhost"),
        )
        .connect_lazy()
        .unwrap();
    let err = run_fail_fast(client).await.unwrap_err();
    assert!(taskbroker_client::worker::misconfigured(&err), "{err}");
}
