//! Builds and runs the broker: store (migrated) -> service -> gRPC server, plus the
//! reaper and the cross-replica listener. Shutdown drains long-polls first.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;

use crate::api::{AdminApi, BrokerApi};
use crate::dispatch::Dispatcher;
use crate::maintenance::Reaper;
use crate::pb::admin_service_server::AdminServiceServer;
use crate::pb::broker_service_server::BrokerServiceServer;
use crate::service::{Broker, Clock, Settings};
use crate::store::{self, StoreError};

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
    #[error("gRPC server failed: {0}")]
    Serve(#[source] tonic::transport::Error),
}

/// What to build.
pub struct AppConfig {
    pub listen: SocketAddr,
    pub database_url: String,
    pub db_max_connections: u32,
    pub reclaim_interval: Duration,
    pub settings: Settings,
}

/// A running broker.
pub struct App {
    pub addr: SocketAddr,
    pub broker: Arc<Broker>,
    stop: CancellationToken,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
}

/// Opens and migrates the database, binds the port and starts serving.
pub async fn start(config: AppConfig, clock: Arc<dyn Clock>) -> Result<App, AppError> {
    let store = store::connect(&config.database_url, config.db_max_connections)
        .await
        .map_err(AppError::Database)?;
    store.migrate().await.map_err(AppError::Migrate)?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| AppError::Bind {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| AppError::Bind {
        addr: config.listen,
        source,
    })?;

    let dispatch = Arc::new(Dispatcher::new());
    let broker = Arc::new(Broker::new(
        store.clone(),
        dispatch.clone(),
        clock,
        config.settings,
    ));
    let stop = CancellationToken::new();
    let d = dispatch.clone();
    store.spawn_listener(Arc::new(move |q| d.wake(q)), stop.clone());
    tokio::spawn(Reaper::new(broker.clone(), config.reclaim_interval).run(stop.clone()));

    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let server = Server::builder()
        .tcp_nodelay(true)
        .add_service(BrokerServiceServer::new(BrokerApi::new(broker.clone())))
        .add_service(AdminServiceServer::new(AdminApi::new(broker.clone())))
        .serve_with_incoming_shutdown(incoming, stop.clone().cancelled_owned());
    let server = tokio::spawn(server);
    Ok(App {
        addr,
        broker,
        stop,
        server,
    })
}

impl App {
    /// Stops: long-polls answer empty at once, no new calls are accepted, in-flight
    /// calls get `grace` to finish, then the pool closes.
    pub async fn shutdown(self, grace: Duration) -> Result<(), AppError> {
        self.broker.dispatcher().drain();
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
