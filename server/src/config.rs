//! Command-line and environment configuration of `taskbroker serve`.
//! Every flag also reads a `TASKBROKER_*` environment variable.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

use crate::domain::RetryPolicy;
use crate::domain::validate::Limits;
use crate::service::Settings;

/// Where the broker keeps its tasks.
#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// `sqlite://PATH` (created if missing) or `postgres://USER:PASS@HOST/DB`.
    #[arg(
        long,
        env = "TASKBROKER_DATABASE_URL",
        default_value = "sqlite://taskbroker.db"
    )]
    pub database_url: String,

    /// Postgres connections per broker (SQLite uses one writer and four readers).
    #[arg(long, env = "TASKBROKER_DB_MAX_CONNECTIONS", default_value_t = 16)]
    pub db_max_connections: u32,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// gRPC listen address. Port 0 picks a free port (printed at start).
    #[arg(long, env = "TASKBROKER_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,

    #[command(flatten)]
    pub database: DatabaseArgs,

    /// How often expired leases and passed deadlines are looked for.
    #[arg(long, env = "TASKBROKER_RECLAIM_INTERVAL", default_value = "500ms", value_parser = humantime::parse_duration)]
    pub reclaim_interval: Duration,

    /// How long in-flight calls may take to finish after SIGTERM/SIGINT.
    #[arg(long, env = "TASKBROKER_SHUTDOWN_GRACE", default_value = "20s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,

    /// Largest task payload in bytes.
    #[arg(long, env = "TASKBROKER_MAX_PAYLOAD_BYTES", default_value_t = 1 << 20)]
    pub max_payload_bytes: usize,

    /// Largest checkpoint in bytes.
    #[arg(long, env = "TASKBROKER_MAX_CHECKPOINT_BYTES", default_value_t = 1 << 20)]
    pub max_checkpoint_bytes: usize,

    /// Largest result in bytes.
    #[arg(long, env = "TASKBROKER_MAX_RESULT_BYTES", default_value_t = 1 << 20)]
    pub max_result_bytes: usize,

    /// Lease duration when a Lease names none.
    #[arg(long, env = "TASKBROKER_DEFAULT_LEASE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub default_lease: Duration,

    /// Shortest lease and extension accepted.
    #[arg(long, env = "TASKBROKER_MIN_LEASE", default_value = "1s", value_parser = humantime::parse_duration)]
    pub min_lease: Duration,

    /// Longest lease and extension accepted.
    #[arg(long, env = "TASKBROKER_MAX_LEASE", default_value = "24h", value_parser = humantime::parse_duration)]
    pub max_lease: Duration,

    /// Longest long-poll `wait` accepted.
    #[arg(long, env = "TASKBROKER_MAX_WAIT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub max_wait: Duration,

    /// Default retry policy: attempts in all.
    #[arg(long, env = "TASKBROKER_RETRY_MAX_ATTEMPTS", default_value_t = 3)]
    pub retry_max_attempts: u32,

    /// Default retry policy: backoff before the second attempt.
    #[arg(long, env = "TASKBROKER_RETRY_INITIAL_BACKOFF", default_value = "10s", value_parser = humantime::parse_duration)]
    pub retry_initial_backoff: Duration,

    /// Default retry policy: backoff growth per failure.
    #[arg(long, env = "TASKBROKER_RETRY_MULTIPLIER", default_value_t = 2.0)]
    pub retry_multiplier: f64,

    /// Default retry policy: longest backoff.
    #[arg(long, env = "TASKBROKER_RETRY_MAX_BACKOFF", default_value = "1h", value_parser = humantime::parse_duration)]
    pub retry_max_backoff: Duration,

    /// Default retry policy: spread of each backoff, 0 to 1.
    #[arg(long, env = "TASKBROKER_RETRY_JITTER", default_value_t = 0.2)]
    pub retry_jitter: f64,
}

impl ServeArgs {
    /// Checks the values that clap's types do not; the message is one line.
    pub fn settings(&self) -> Result<Settings, String> {
        if self.min_lease.is_zero() || self.min_lease > self.max_lease {
            return Err("--min-lease must be above zero and at most --max-lease".into());
        }
        if self.default_lease < self.min_lease || self.default_lease > self.max_lease {
            return Err("--default-lease must lie between --min-lease and --max-lease".into());
        }
        if self.retry_max_attempts == 0 {
            return Err("--retry-max-attempts must be at least 1".into());
        }
        if !(1.0..=100.0).contains(&self.retry_multiplier) {
            return Err("--retry-multiplier must be between 1 and 100".into());
        }
        if !(0.0..=1.0).contains(&self.retry_jitter) {
            return Err("--retry-jitter must be between 0 and 1".into());
        }
        if self.reclaim_interval.is_zero() {
            return Err("--reclaim-interval must be above zero".into());
        }
        let limits = Limits {
            max_payload_bytes: self.max_payload_bytes,
            max_checkpoint_bytes: self.max_checkpoint_bytes,
            max_result_bytes: self.max_result_bytes,
            min_lease: self.min_lease,
            max_lease: self.max_lease,
            default_lease: self.default_lease,
            max_wait: self.max_wait,
            ..Limits::default()
        };
        Ok(Settings {
            limits,
            default_retry: RetryPolicy {
                max_attempts: self.retry_max_attempts,
                initial_backoff: self.retry_initial_backoff,
                backoff_multiplier: self.retry_multiplier,
                max_backoff: self.retry_max_backoff,
                jitter: self.retry_jitter,
            },
        })
    }
}
