//! `taskbroker relay`: ships the rows of `taskbroker_outbox` in the producer's
//! Postgres or MySQL to the broker until SIGTERM or Ctrl-C (see `outbox::Relay` and
//! docs/outbox.md).

use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use super::{CliError, Connection, client_builder, parse};
use crate::outbox::{self, Relay, RelayError, Source};

#[derive(Debug, clap::Args)]
pub struct RelayArgs {
    /// The producer's database, which holds the outbox table: postgres://USER:PASS@HOST/DB
    /// or mysql://USER:PASS@HOST/DB (MySQL 8.0.13+, MariaDB 10.6+; `mariadb://` is read too).
    #[arg(long, env = "TASKBROKER_RELAY_SOURCE", hide_env_values = true)]
    pub source: String,
    /// Create the outbox table (and on Postgres its trigger) first, if missing
    /// (migrations/outbox/postgres or mysql; needs the right to create them).
    #[arg(long)]
    pub init_schema: bool,
    /// Ship what is committed now, then exit (instead of running until SIGTERM).
    #[arg(long)]
    pub once: bool,
    /// Rows per Submit, 1 to 1000.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub batch_size: u32,
    /// How often the table is read when no notification came (10ms to 1h); on MySQL,
    /// which has no notifications, how often it is read.
    #[arg(long, default_value = "2s", value_parser = parse::duration)]
    pub poll_interval: Duration,
    /// How often to log what was shipped and the lag.
    #[arg(long, default_value = "30s", value_parser = parse::duration)]
    pub report_interval: Duration,
    /// Serve Prometheus metrics (rows shipped and refused, lag) at http://ADDR/metrics,
    /// for example 0.0.0.0:9090. Off unless given.
    #[arg(long, env = "TASKBROKER_RELAY_METRICS_LISTEN")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub connection: Connection,
}

pub async fn run(a: RelayArgs) -> Result<String, CliError> {
    // Installed before anything else: a SIGTERM during start-up or the first batch
    // must stop the relay cleanly, not kill it with the default action.
    let stop = stop_signal().map_err(|e| CliError::Usage(format!("cannot handle SIGTERM: {e}")))?;
    let pool = source_pool(&a.source)?;
    if a.init_schema {
        match &pool {
            Source::Postgres(p) => outbox::init_schema(p).await,
            Source::MySql(p) => outbox::mysql::init_schema(p).await,
        }
        .map_err(RelayError::from)?;
    }
    // Lazy: the relay starts (and keeps its rows) while the broker is away.
    let client = client_builder(&a.connection)?.connect_lazy()?;
    let relay = Relay::builder(pool.clone(), client)
        .batch_size(a.batch_size as usize)
        .poll_interval(a.poll_interval)
        .report_interval(a.report_interval)
        .build();
    let out = if a.once {
        let r = relay.run_once().await?;
        format!(
            "shipped {} rows ({} already at the broker), refused {}\n",
            r.shipped, r.deduplicated, r.refused
        )
    } else {
        let metrics = match a.metrics_listen {
            Some(addr) => {
                let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
                    CliError::Usage(format!("--metrics-listen {addr}: cannot listen: {e}"))
                })?;
                if let Ok(local) = listener.local_addr() {
                    tracing::info!("outbox relay metrics on http://{local}/metrics");
                }
                Some(tokio::spawn(outbox::serve_metrics(listener, relay.clone())))
            }
            None => None,
        };
        tracing::info!(addr = %a.connection.addr, "outbox relay running");
        relay.run(stop).await?;
        if let Some(m) = metrics {
            m.abort();
        }
        String::new()
    };
    match pool {
        Source::Postgres(p) => p.close().await,
        Source::MySql(p) => p.close().await,
    }
    Ok(out)
}

/// A lazy pool for `--source`, Postgres or MySQL by the URL's scheme. One connection
/// listens (Postgres), one ships batches, one reads the lag for the report.
fn source_pool(url: &str) -> Result<Source, CliError> {
    let scheme = url.split_once("://").map(|(s, _)| s).unwrap_or("");
    match scheme {
        "postgres" | "postgresql" => {
            let options = PgConnectOptions::from_str(url)
                .map_err(|e| CliError::Usage(format!("--source is not a Postgres URL: {e}")))?
                .application_name("taskbroker relay");
            Ok(Source::Postgres(
                PgPoolOptions::new()
                    .max_connections(3)
                    .acquire_timeout(Duration::from_secs(10))
                    .connect_lazy_with(options),
            ))
        }
        "mysql" | "mariadb" => {
            let url = url.replacen("mariadb://", "mysql://", 1);
            let options = MySqlConnectOptions::from_str(&url)
                .map_err(|e| CliError::Usage(format!("--source is not a MySQL URL: {e}")))?;
            Ok(Source::MySql(
                MySqlPoolOptions::new()
                    .max_connections(3)
                    .acquire_timeout(Duration::from_secs(10))
                    .connect_lazy_with(options),
            ))
        }
        _ => Err(CliError::Usage(
            "--source must be a postgres:// or mysql:// URL".into(),
        )),
    }
}

/// Completes on SIGTERM (how Kubernetes stops a pod) or Ctrl-C; both handlers are
/// registered when this returns, not when the future is first polled.
fn stop_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}
