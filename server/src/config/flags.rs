//! The command line and the environment: `taskbroker serve`'s flags (each with
//! its `TASKBROKER_*` variable), the database flag `migrate` shares, and how
//! they are layered over the defaults and the TOML file.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use figment::Figment;
use figment::providers::{Format, Serialized, Toml};

use super::Config;

/// Where the broker keeps its tasks (shared by `serve` and `migrate`).
#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// `sqlite://PATH` (created if missing), `postgres://USER:PASS@HOST/DB` or
    /// `mysql://USER:PASS@HOST/DB` (MySQL 8.0+, MariaDB 10.6+).
    #[arg(
        long,
        env = "TASKBROKER_DATABASE_URL",
        default_value = "sqlite://taskbroker.db"
    )]
    pub database_url: String,
}

/// Flags of `taskbroker serve` (and `config print`). Each one, when given (or set
/// through its environment variable), overrides the TOML file.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// A TOML file with any of the settings below (snake_case keys).
    #[arg(long, env = "TASKBROKER_CONFIG")]
    pub config: Option<PathBuf>,
    /// gRPC listen address [default: 127.0.0.1:50051].
    #[arg(long, env = "TASKBROKER_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// `sqlite://PATH`, `postgres://USER:PASS@HOST/DB` or `mysql://USER:PASS@HOST/DB`
    /// (MySQL 8.0+, MariaDB 10.6+) [default: sqlite://taskbroker.db].
    #[arg(long, env = "TASKBROKER_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Postgres or MySQL/MariaDB connections per broker [default: 16].
    #[arg(long, env = "TASKBROKER_DB_MAX_CONNECTIONS")]
    pub db_max_connections: Option<u32>,
    /// Prometheus metrics address; empty turns it off [default: 127.0.0.1:9090].
    #[arg(long, env = "TASKBROKER_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
    /// How old /metrics queue depths may grow; 0 counts on every scrape [default: 10s].
    #[arg(long, env = "TASKBROKER_METRICS_DEPTH_MAX_AGE")]
    pub metrics_depth_max_age: Option<String>,
    /// How often expired leases and deadlines are looked for [default: 500ms].
    #[arg(long, env = "TASKBROKER_RECLAIM_INTERVAL")]
    pub reclaim_interval: Option<String>,
    /// Time in-flight calls get after SIGTERM [default: 20s].
    #[arg(long, env = "TASKBROKER_SHUTDOWN_GRACE")]
    pub shutdown_grace: Option<String>,
    /// Longest call; Lease gets its wait on top [default: 30s].
    #[arg(long, env = "TASKBROKER_REQUEST_TIMEOUT")]
    pub request_timeout: Option<String>,
    /// Calls at once before new ones are shed [default: 4096].
    #[arg(long, env = "TASKBROKER_MAX_CONCURRENT_REQUESTS")]
    pub max_concurrent_requests: Option<usize>,
    /// Largest request message in bytes [default: 16 MiB].
    #[arg(long, env = "TASKBROKER_MAX_MESSAGE_BYTES")]
    pub max_message_bytes: Option<usize>,
    /// Connection age after which clients are asked to reconnect; 0 = never [default: 30m].
    #[arg(long, env = "TASKBROKER_MAX_CONNECTION_AGE")]
    pub max_connection_age: Option<String>,
    /// Allow a non-loopback listen address without authentication (e.g. behind a mesh).
    #[arg(long, env = "TASKBROKER_INSECURE")]
    pub insecure: Option<bool>,
    /// Browser origins allowed to call the gRPC port, comma-separated [default: none].
    #[arg(long, env = "TASKBROKER_CORS_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub cors_allowed_origins: Option<Vec<String>>,
    /// Keep finished tasks this long; 0 keeps them forever [default: 7days].
    #[arg(long, env = "TASKBROKER_RETENTION")]
    pub retention: Option<String>,
    /// A file of `ROLE TOKEN [NAME]` lines; turns authentication on.
    #[arg(long, env = "TASKBROKER_AUTH_TOKENS_FILE")]
    pub auth_tokens_file: Option<PathBuf>,
    /// TLS certificate chain (PEM).
    #[arg(long, env = "TASKBROKER_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, env = "TASKBROKER_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CA that client certificates must chain to (mTLS).
    #[arg(long, env = "TASKBROKER_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Largest task payload in bytes [default: 1 MiB].
    #[arg(long, env = "TASKBROKER_MAX_PAYLOAD_BYTES")]
    pub max_payload_bytes: Option<usize>,
    /// Largest checkpoint in bytes [default: 1 MiB].
    #[arg(long, env = "TASKBROKER_MAX_CHECKPOINT_BYTES")]
    pub max_checkpoint_bytes: Option<usize>,
    /// Largest result in bytes [default: 1 MiB].
    #[arg(long, env = "TASKBROKER_MAX_RESULT_BYTES")]
    pub max_result_bytes: Option<usize>,
    /// Lease duration when a Lease names none [default: 30s].
    #[arg(long, env = "TASKBROKER_DEFAULT_LEASE")]
    pub default_lease: Option<String>,
    /// Shortest lease and extension [default: 1s].
    #[arg(long, env = "TASKBROKER_MIN_LEASE")]
    pub min_lease: Option<String>,
    /// Longest lease and extension [default: 24h].
    #[arg(long, env = "TASKBROKER_MAX_LEASE")]
    pub max_lease: Option<String>,
    /// Longest long-poll wait [default: 60s].
    #[arg(long, env = "TASKBROKER_MAX_WAIT")]
    pub max_wait: Option<String>,
    /// Bytes one Lease reply (or a settle's `lease_next` tasks) encodes to at most,
    /// each task counted at the most its fields can take on the wire; a reply
    /// always holds at least one task [default: 4194304, 4 MiB, every gRPC
    /// client's default receive limit].
    #[arg(long, env = "TASKBROKER_MAX_LEASE_REPLY_BYTES")]
    pub max_lease_reply_bytes: Option<usize>,
    /// Longest cooldown a worker's Fail may set on its task's key or bucket
    /// (`FailRequest.cooldown`); a longer one is refused [default: 1h].
    #[arg(long, env = "TASKBROKER_MAX_COOLDOWN")]
    pub max_cooldown: Option<String>,
    /// Default retry policy: attempts in all [default: 3].
    #[arg(long, env = "TASKBROKER_RETRY_MAX_ATTEMPTS")]
    pub retry_max_attempts: Option<u32>,
    /// Default retry policy: first backoff [default: 10s].
    #[arg(long, env = "TASKBROKER_RETRY_INITIAL_BACKOFF")]
    pub retry_initial_backoff: Option<String>,
    /// Default retry policy: backoff growth [default: 2].
    #[arg(long, env = "TASKBROKER_RETRY_MULTIPLIER")]
    pub retry_multiplier: Option<f64>,
    /// Default retry policy: longest backoff [default: 1h].
    #[arg(long, env = "TASKBROKER_RETRY_MAX_BACKOFF")]
    pub retry_max_backoff: Option<String>,
    /// Default retry policy: jitter 0 to 1 [default: 0.2].
    #[arg(long, env = "TASKBROKER_RETRY_JITTER")]
    pub retry_jitter: Option<f64>,
    /// Keep task events this long; 0 keeps them forever [default: 7days].
    #[arg(long, env = "TASKBROKER_EVENTS_RETENTION")]
    pub events_retention: Option<String>,
    /// Sync match on Postgres [default: true].
    #[arg(long, env = "TASKBROKER_SYNC_MATCH_POSTGRES")]
    pub sync_match_postgres: Option<bool>,
    /// MySQL/MariaDB: settle and lease jobs a broker runs at once [default: 1].
    #[arg(long, env = "TASKBROKER_MYSQL_JOBS_IN_FLIGHT")]
    pub mysql_jobs_in_flight: Option<u32>,
}

macro_rules! layer {
    ($fig:ident, $($key:literal => $val:expr),* $(,)?) => {
        $( if let Some(v) = &$val { $fig = $fig.merge(Serialized::default($key, v)); } )*
    };
}

impl ServeArgs {
    /// Defaults, then the TOML file, then environment and flags.
    pub fn load(&self) -> Result<Config, String> {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = &self.config {
            if !path.exists() {
                return Err(format!("config file {} does not exist", path.display()));
            }
            fig = fig.merge(Toml::file_exact(path));
        }
        layer!(fig,
            "listen" => self.listen,
            "database_url" => self.database_url,
            "db_max_connections" => self.db_max_connections,
            "metrics_listen" => self.metrics_listen,
            "metrics_depth_max_age" => self.metrics_depth_max_age,
            "reclaim_interval" => self.reclaim_interval,
            "shutdown_grace" => self.shutdown_grace,
            "request_timeout" => self.request_timeout,
            "max_concurrent_requests" => self.max_concurrent_requests,
            "max_message_bytes" => self.max_message_bytes,
            "max_connection_age" => self.max_connection_age,
            "insecure" => self.insecure,
            "cors_allowed_origins" => self.cors_allowed_origins,
            "retention" => self.retention,
            "auth.tokens_file" => self.auth_tokens_file,
            "tls.cert" => self.tls_cert,
            "tls.key" => self.tls_key,
            "tls.client_ca" => self.tls_client_ca,
            "limits.max_payload_bytes" => self.max_payload_bytes,
            "limits.max_checkpoint_bytes" => self.max_checkpoint_bytes,
            "limits.max_result_bytes" => self.max_result_bytes,
            "limits.default_lease" => self.default_lease,
            "limits.min_lease" => self.min_lease,
            "limits.max_lease" => self.max_lease,
            "limits.max_wait" => self.max_wait,
            "limits.max_lease_reply_bytes" => self.max_lease_reply_bytes,
            "limits.max_cooldown" => self.max_cooldown,
            "retry.max_attempts" => self.retry_max_attempts,
            "retry.initial_backoff" => self.retry_initial_backoff,
            "retry.multiplier" => self.retry_multiplier,
            "retry.max_backoff" => self.retry_max_backoff,
            "retry.jitter" => self.retry_jitter,
            "events_retention" => self.events_retention,
            "sync_match_postgres" => self.sync_match_postgres,
            "mysql_jobs_in_flight" => self.mysql_jobs_in_flight,
        );
        fig.extract::<Config>().map_err(|e| {
            // figment's message names the key and the source; keep it to one line.
            e.to_string().replace('\n', " ")
        })
    }
}
