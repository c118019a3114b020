//! Builds and runs the broker: store (migrated) -> service -> gRPC server (with
//! health, reflection and the guard layer) and the metrics port, plus the reaper,
//! the health monitor and the cross-replica listener. Shutdown drains first.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::api::auth::Authenticator;
use crate::api::connect::ConnectLayer;
use crate::api::connect::cors::CorsLayer;
use crate::api::guard::{GuardConfig, GuardLayer};
use crate::api::{AdminApi, BrokerApi, ScalerApi, ScheduleApi};
use crate::api::{DESCRIPTOR, KEDA_DESCRIPTOR, RPC_DESCRIPTOR};
use crate::dispatch::Dispatcher;
use crate::domain::token::TokenEntry;
use crate::keda::external_scaler_server::ExternalScalerServer;
use crate::maintenance::{FinishedFold, Reaper, Retention, Scheduler, Statistics};
use crate::metrics::Metrics;
use crate::pb::admin_service_server::AdminServiceServer;
use crate::pb::broker_service_server::BrokerServiceServer;
use crate::pb::schedule_service_server::ScheduleServiceServer;
use crate::service::{Broker, Clock, Settings};
use crate::store::{self, StoreError};

/// The readiness service name in grpc.health.v1 (service "" is liveness).
pub const READINESS: &str = "readiness";

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("cannot open the database: {0}")]
    Database(#[source] StoreError),
    #[error("cannot migrate the database: {0}")]
    Migrate(#[source] StoreError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS configuration rejected: {0}")]
    Tls(#[source] tonic::transport::Error),
    #[error("gRPC server failed: {0}")]
    Serve(#[source] tonic::transport::Error),
}

/// HTTP/2 and call limits of the gRPC server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Longest time a call may take (Lease: its wait plus this).
    pub request_timeout: Duration,
    /// Calls at once before new ones are shed with RESOURCE_EXHAUSTED.
    pub max_concurrent_requests: usize,
    /// Largest request message.
    pub max_message_bytes: usize,
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
    /// Connections are closed (gracefully) after this age so clients rebalance.
    pub max_connection_age: Option<Duration>,
    /// Browser origins allowed to call across origins (CORS); empty: none.
    pub cors_allowed_origins: Vec<String>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            request_timeout: Duration::from_secs(30),
            max_concurrent_requests: 4096,
            max_message_bytes: 16 << 20,
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            max_connection_age: Some(Duration::from_secs(30 * 60)),
            cors_allowed_origins: Vec::new(),
        }
    }
}

/// PEM material for TLS; with `client_ca`, clients must present a certificate it signed.
#[derive(Clone)]
pub struct TlsOptions {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    pub client_ca_pem: Option<Vec<u8>>,
}

/// What to build.
pub struct AppConfig {
    pub listen: SocketAddr,
    pub database_url: String,
    pub db_max_connections: u32,
    pub reclaim_interval: Duration,
    pub settings: Settings,
    /// Prometheus port; `None` serves no metrics.
    pub metrics_listen: Option<SocketAddr>,
    pub server: ServerOptions,
    /// Bearer tokens; empty turns authentication off.
    pub auth: Vec<TokenEntry>,
    pub tls: Option<TlsOptions>,
    /// Time between scheduler passes. Default 250 ms (fires within a second).
    pub schedule_interval: Duration,
    /// How old the queue depths on `/metrics` may grow before a scrape counts
    /// again in the background (`crate::depth`); zero counts on every scrape.
    pub metrics_depth_max_age: Duration,
}

impl AppConfig {
    /// Defaults for everything but the database, on 127.0.0.1 with any free port.
    pub fn new(database_url: impl Into<String>) -> Self {
        AppConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            database_url: database_url.into(),
            db_max_connections: 16,
            reclaim_interval: Duration::from_millis(500),
            settings: Settings::default(),
            metrics_listen: None,
            server: ServerOptions::default(),
            auth: Vec::new(),
            tls: None,
            schedule_interval: Duration::from_millis(250),
            metrics_depth_max_age: crate::depth::DEFAULT_MAX_AGE,
        }
    }
}

/// A running broker.
pub struct App {
    pub addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    pub broker: Arc<Broker>,
    health: HealthReporter,
    stop: CancellationToken,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
}

fn bind_error(addr: SocketAddr) -> impl FnOnce(std::io::Error) -> AppError {
    move |source| AppError::Bind { addr, source }
}

/// Opens and migrates the database, binds the ports and starts serving.
pub async fn start(config: AppConfig, clock: Arc<dyn Clock>) -> Result<App, AppError> {
    let store = store::connect(&config.database_url, config.db_max_connections)
        .await
        .map_err(AppError::Database)?;
    store.migrate().await.map_err(AppError::Migrate)?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(bind_error(config.listen))?;
    let addr = listener.local_addr().map_err(bind_error(config.listen))?;

    let metrics = Arc::new(Metrics::new());
    let dispatch = Arc::new(Dispatcher::new());
    let max_wait = config.settings.limits.max_wait;
    let broker = Arc::new(Broker::new(
        store.clone(),
        dispatch.clone(),
        clock,
        config.settings,
        metrics.clone(),
    ));
    // Admission: store the configured queue settings, read the live ones,
    // and keep reading them.
    broker.queues_start().await.map_err(AppError::Database)?;
    let stop = CancellationToken::new();
    tokio::spawn(broker.clone().queues_refresh(stop.clone()));
    let d = dispatch.clone();
    store.spawn_listener(Arc::new(move |q| d.wake(q)), stop.clone());
    tokio::spawn(Reaper::new(broker.clone(), config.reclaim_interval).run(stop.clone()));
    tokio::spawn(Retention::new(broker.clone(), Duration::from_secs(60)).run(stop.clone()));
    tokio::spawn(Scheduler::new(broker.clone(), config.schedule_interval).run(stop.clone()));
    tokio::spawn(Statistics::new(broker.clone(), Duration::from_secs(1)).run(stop.clone()));
    tokio::spawn(FinishedFold::new(broker.clone(), Duration::from_secs(15)).run(stop.clone()));
    // Flow: event retention, and the configured dead-letter queues.
    tokio::spawn(
        crate::maintenance::events::EventRetention::new(broker.clone(), Duration::from_secs(60))
            .run(stop.clone()),
    );
    let dead_letters: Vec<(String, String)> = broker
        .settings()
        .flow
        .dead_letter_queues
        .iter()
        .map(|(q, d)| (q.clone(), d.clone()))
        .collect();
    store
        .queue_dead_letters_set(&dead_letters)
        .await
        .map_err(AppError::Database)?;

    // The readiness monitor's view of the database, for the HTTP /readyz probe.
    let (database_up, database_up_rx) = tokio::sync::watch::channel(crate::http::Database::Up);
    let metrics_addr = match config.metrics_listen {
        Some(m) => Some(
            crate::http::serve(
                m,
                broker.clone(),
                database_up_rx,
                &config.auth,
                stop.clone(),
                config.metrics_depth_max_age,
            )
            .await
            .map_err(bind_error(m))?,
        ),
        None => None,
    };

    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_service_status("", ServingStatus::Serving).await;
    // The database just answered the migrations: ready from the start.
    health
        .set_service_status(READINESS, ServingStatus::Serving)
        .await;
    tokio::spawn(monitor_readiness(
        broker.clone(),
        health.clone(),
        database_up,
        stop.clone(),
    ));
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(DESCRIPTOR)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(KEDA_DESCRIPTOR)
        .register_encoded_file_descriptor_set(RPC_DESCRIPTOR)
        .build_v1()
        .expect("the embedded descriptors are valid");
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(DESCRIPTOR)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(KEDA_DESCRIPTOR)
        .register_encoded_file_descriptor_set(RPC_DESCRIPTOR)
        .build_v1alpha()
        .expect("the embedded descriptors are valid");

    let opts = &config.server;
    // KEDA's scaler checks its own token (from the trigger metadata).
    let scaler = ScalerApi::new(
        broker.clone(),
        (!config.auth.is_empty()).then(|| Authenticator::new(&config.auth)),
    );
    let guard_metrics = metrics.clone();
    let guard = GuardLayer::new(
        GuardConfig {
            max_concurrent: opts.max_concurrent_requests,
            request_timeout: opts.request_timeout,
            lease_timeout: max_wait + opts.request_timeout,
            auth: (!config.auth.is_empty()).then(|| Authenticator::new(&config.auth)),
        },
        guard_metrics,
    );
    // Connect (HTTP/JSON) calls turn into gRPC calls in front of the guard, so
    // the guard's checks and metrics run once for both.
    let connect = ConnectLayer::new(
        opts.max_message_bytes,
        (!config.auth.is_empty()).then(|| Authenticator::new(&config.auth)),
        metrics.clone(),
    );
    let mut builder = Server::builder()
        // HTTP/1.1 too: Connect over curl and browsers; gRPC stays on HTTP/2.
        .accept_http1(true)
        .http2_keepalive_interval(Some(opts.keepalive_interval))
        .http2_keepalive_timeout(Some(opts.keepalive_timeout));
    if let Some(age) = opts.max_connection_age {
        // A long-poll in progress when the connection ages out still finishes.
        builder = builder
            .max_connection_age(age)
            .max_connection_age_grace(max_wait + Duration::from_secs(10));
    }
    if let Some(tls) = &config.tls {
        let mut t =
            ServerTlsConfig::new().identity(Identity::from_pem(&tls.cert_pem, &tls.key_pem));
        if let Some(ca) = &tls.client_ca_pem {
            t = t.client_ca_root(Certificate::from_pem(ca));
        }
        builder = builder.tls_config(t).map_err(AppError::Tls)?;
    }
    let max = opts.max_message_bytes;
    // Nagle off: small replies must not wait for the peer's delayed ACK (the
    // builder's `tcp_nodelay` does not reach connections of our own listener).
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let server = builder
        // Browsers: CORS for the configured origins; Connect and gRPC-Web calls
        // become gRPC calls before the guard.
        .layer(CorsLayer::new(&opts.cors_allowed_origins))
        .layer(connect)
        .layer(tonic_web::GrpcWebLayer::new())
        .layer(guard)
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(
            BrokerServiceServer::new(BrokerApi::new(broker.clone())).max_decoding_message_size(max),
        )
        .add_service(
            AdminServiceServer::new(AdminApi::new(broker.clone())).max_decoding_message_size(max),
        )
        .add_service(ExternalScalerServer::new(scaler))
        .add_service(
            ScheduleServiceServer::new(ScheduleApi::new(broker.clone()))
                .max_decoding_message_size(max),
        )
        .serve_with_incoming_shutdown(incoming, stop.clone().cancelled_owned());
    let server = tokio::spawn(server);
    Ok(App {
        addr,
        metrics_addr,
        broker,
        health,
        stop,
        server,
    })
}

/// Keeps the readiness status in step with the database (checked every second)
/// and with draining; `database_up` carries the same answer to the HTTP /readyz.
async fn monitor_readiness(
    broker: Arc<Broker>,
    health: HealthReporter,
    database_up: tokio::sync::watch::Sender<crate::http::Database>,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    use crate::http::Database;
    let mut last = Database::Up;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = broker.dispatcher().draining().cancelled() => return,
            _ = tick.tick() => {}
        }
        let ping = tokio::time::timeout(Duration::from_secs(2), broker.store().ping()).await;
        let now = match ping {
            Ok(Ok(())) => Database::Up,
            Ok(Err(e)) if e.is_standby() => Database::Standby,
            _ => Database::Unreachable,
        };
        if last != now {
            match now {
                Database::Up => tracing::info!("database reachable: ready"),
                Database::Unreachable => tracing::warn!("database unreachable: not ready"),
                Database::Standby => tracing::warn!(
                    "database host is a standby (in recovery), every write is refused: not ready"
                ),
            }
            let status = if now == Database::Up {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            // /readyz first: whoever sees the gRPC status change sees it there too.
            database_up.send_replace(now);
            health.set_service_status(READINESS, status).await;
            last = now;
        }
    }
}

impl App {
    /// Stops: readiness NOT_SERVING, long-polls answer empty at once, no new calls
    /// are accepted, in-flight calls get `grace` to finish, then the pool closes.
    pub async fn shutdown(self, grace: Duration) -> Result<(), AppError> {
        self.broker.dispatcher().drain();
        self.health
            .set_service_status(READINESS, ServingStatus::NotServing)
            .await;
        self.stop.cancel();
        let result = match tokio::time::timeout(grace, self.server).await {
            Ok(Ok(r)) => r.map_err(AppError::Serve),
            Ok(Err(join)) => {
                tracing::error!(error = %join, "server task ended abnormally");
                Ok(())
            }
            Err(_) => {
                tracing::warn!(
                    ?grace,
                    "in-flight calls did not finish within the grace period"
                );
                Ok(())
            }
        };
        self.broker.store().close().await;
        result
    }

    /// Runs until the server stops by itself (it does not, short of an error).
    pub async fn wait(&mut self) -> Result<(), AppError> {
        match (&mut self.server).await {
            Ok(r) => r.map_err(AppError::Serve),
            Err(_) => Ok(()),
        }
    }
}

/// What `taskbroker serve` prints once it listens: where the broker, its
/// database, metrics and console are, and two commands to try (with the token
/// flag when tokens are configured, as every call then needs one).
pub fn banner(
    addr: SocketAddr,
    database: &str,
    http_addr: Option<SocketAddr>,
    tokens: bool,
    tls: bool,
) -> String {
    let scheme = if tls { "https" } else { "http" };
    let mut out = format!("taskbroker listening on {addr}\n  database: {database}\n");
    if let Some(m) = http_addr {
        out += &format!("  metrics:  http://{m}/metrics\n  console:  http://{m}/\n");
    }
    let auth = if tokens {
        " --token \"$TASKBROKER_TOKEN\""
    } else {
        ""
    };
    out += &format!(
        "  try:      taskbroker submit emails --payload hello --addr {scheme}://{addr}{auth}\n"
    );
    out += &format!("            taskbroker list --addr {scheme}://{addr}{auth}\n");
    if tokens {
        out += "            (tokens are configured: pass one with --token or TASKBROKER_TOKEN)\n";
    }
    out
}

#[cfg(test)]
mod banner_tests {
    use super::banner;

    #[test]
    fn shows_the_console_and_how_to_pass_a_token() {
        let addr = "127.0.0.1:50051".parse().unwrap();
        let http = Some("127.0.0.1:9090".parse().unwrap());
        let open = banner(addr, "sqlite:x.db", http, false, false);
        assert!(
            open.contains("console:  http://127.0.0.1:9090/\n"),
            "{open}"
        );
        assert!(!open.contains("--token"), "{open}");
        let locked = banner(addr, "sqlite:x.db", http, true, true);
        assert!(
            locked.contains("--addr https://127.0.0.1:50051 --token \"$TASKBROKER_TOKEN\""),
            "{locked}"
        );
        assert!(
            locked.lines().filter(|l| l.contains("--token")).count() >= 2,
            "{locked}"
        );
        let no_http = banner(addr, "sqlite:x.db", None, false, false);
        assert!(!no_http.contains("console"), "{no_http}");
    }
}
