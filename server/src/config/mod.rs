//! Configuration of `taskbroker serve`, in layers: built-in defaults, then a TOML
//! file (`--config`), then `TASKBROKER_*` environment variables, then flags.
//! Everything is validated before any port is bound; an invalid value stops the
//! broker with a one-line reason.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

use crate::app::{AppConfig, ServerOptions, TlsOptions};
use crate::domain::RetryPolicy;
use crate::domain::token::{TokenEntry, parse_token_file};
use crate::domain::validate::{self, Limits};
use crate::service::{QueueSettings, Settings};

/// Where the broker keeps its tasks (shared by `serve` and `migrate`).
#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// `sqlite://PATH` (created if missing) or `postgres://USER:PASS@HOST/DB`.
    #[arg(
        long,
        env = "TASKBROKER_DATABASE_URL",
        default_value = "sqlite://taskbroker.db"
    )]
    pub database_url: String,
}

/// The effective configuration. Field names are the TOML keys.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// gRPC listen address; port 0 picks a free port.
    pub listen: SocketAddr,
    /// `sqlite://PATH` or `postgres://...`.
    pub database_url: String,
    /// Postgres connections per broker.
    pub db_max_connections: u32,
    /// HTTP address of Prometheus `/metrics` and the web console; empty turns it off.
    pub metrics_listen: String,
    /// How old the queue depths on `/metrics` may grow before a scrape counts the
    /// task table again, in the background; 0 counts on every scrape.
    #[serde(with = "humantime_serde")]
    pub metrics_depth_max_age: Duration,
    /// Expired leases and passed deadlines are looked for this often.
    #[serde(with = "humantime_serde")]
    pub reclaim_interval: Duration,
    /// Time in-flight calls get after SIGTERM.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Longest call (Lease: its wait plus this).
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Calls at once (long-polls included) before new ones are shed.
    pub max_concurrent_requests: usize,
    /// Largest request message in bytes.
    pub max_message_bytes: usize,
    /// Connections are closed gracefully at this age so clients rebalance; 0 = never.
    #[serde(with = "humantime_serde")]
    pub max_connection_age: Duration,
    /// Allow a non-loopback listen address without authentication (behind a mesh).
    pub insecure: bool,
    /// Finished tasks are deleted this long after they finish; 0 keeps them.
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
    pub limits: LimitsConfig,
    pub retry: RetryConfig,
    pub tls: Option<TlsConfig>,
    pub auth: AuthConfig,
    /// Per-queue overrides, `[queues.NAME]`.
    pub queues: BTreeMap<String, QueueConfig>,
    /// ListWorkers shows workers seen this recently by any replica. Default 5 min.
    #[serde(with = "humantime_serde")]
    pub worker_ttl: Duration,
    /// Flow: task events are deleted this long after they were recorded; 0 keeps them.
    #[serde(with = "humantime_serde")]
    pub events_retention: Duration,
    /// Sync match on Postgres: a Submit hands its tasks to long-polls
    /// waiting on this replica in its own statement. On by default; `false` turns
    /// it off on Postgres (SQLite always sync-matches).
    pub sync_match_postgres: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    pub max_payload_bytes: usize,
    pub max_checkpoint_bytes: usize,
    pub max_result_bytes: usize,
    #[serde(with = "humantime_serde")]
    pub default_lease: Duration,
    #[serde(with = "humantime_serde")]
    pub min_lease: Duration,
    #[serde(with = "humantime_serde")]
    pub max_lease: Duration,
    #[serde(with = "humantime_serde")]
    pub max_wait: Duration,
    pub max_lease_reply_bytes: usize,
}

/// The default retry policy (and, per queue, its override).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    pub max_attempts: u32,
    #[serde(with = "humantime_serde")]
    pub initial_backoff: Duration,
    pub multiplier: f64,
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
    pub jitter: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by this CA (mTLS).
    pub client_ca: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// A file of `ROLE TOKEN [NAME]` lines (a mounted secret).
    pub tokens_file: Option<PathBuf>,
    /// Tokens given inline.
    pub tokens: Vec<TokenEntry>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueConfig {
    pub retry: Option<RetryConfig>,
    pub max_payload_bytes: Option<usize>,
    #[serde(with = "humantime_serde")]
    pub min_lease: Option<Duration>,
    #[serde(with = "humantime_serde")]
    pub max_lease: Option<Duration>,
    #[serde(with = "humantime_serde")]
    pub retention: Option<Duration>,
    // Admission: the queue's gates, seeding its live settings (see
    // docs/semantics.md "Admission"; UpdateQueue changes them at run time).
    /// Start paused: no leases until resumed.
    pub paused: Option<bool>,
    /// Leases held at once in the cluster; 0 = no limit.
    pub max_concurrent: Option<u32>,
    /// `{ per_second = 50.0, burst = 10 }`: leases granted per second in the cluster.
    pub rate_limit: Option<crate::domain::admission::RateLimit>,
    /// Leases held at once per concurrency key; 0 = no limit.
    pub max_concurrent_per_key: Option<u32>,
    /// Leases granted per second per concurrency key.
    pub per_key_rate_limit: Option<crate::domain::admission::RateLimit>,
    /// `none` or `round_robin_keys`.
    pub fairness: Option<crate::domain::admission::Fairness>,
    /// Each such wait adds 1 to a READY task's effective priority.
    #[serde(with = "humantime_serde")]
    pub priority_aging: Option<Duration>,
    /// Leases one worker holds at once from this queue; 0 = no limit.
    pub max_leases_per_worker: Option<u32>,
    /// Flow: when a task of this queue goes DEAD, a notice task (JSON: task_id,
    /// queue, key, attempts, last_error) is submitted to this queue in the same
    /// transaction.
    pub dead_letter_queue: Option<String>,
    /// The lease duration of a Lease call that names none.
    #[serde(with = "humantime_serde")]
    pub default_lease: Option<Duration>,
}

impl QueueConfig {
    /// The admission part of a `[queues.X]` table.
    fn gates(&self) -> crate::domain::admission::QueueConfig {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        crate::domain::admission::QueueConfig {
            paused: self.paused.unwrap_or_default(),
            max_concurrent: self.max_concurrent.unwrap_or_default(),
            rate_limit: self.rate_limit,
            max_concurrent_per_key: self.max_concurrent_per_key.unwrap_or_default(),
            per_key_rate_limit: self.per_key_rate_limit,
            fairness: self.fairness.unwrap_or_default(),
            priority_aging_ms: self.priority_aging.map(ms),
            max_leases_per_worker: self.max_leases_per_worker.unwrap_or_default(),
            default_lease_ms: self.default_lease.map(ms),
            ..Default::default()
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 50051)),
            database_url: "sqlite://taskbroker.db".into(),
            db_max_connections: 16,
            metrics_listen: "127.0.0.1:9090".into(),
            metrics_depth_max_age: crate::depth::DEFAULT_MAX_AGE,
            reclaim_interval: Duration::from_millis(500),
            shutdown_grace: Duration::from_secs(20),
            request_timeout: Duration::from_secs(30),
            max_concurrent_requests: 4096,
            max_message_bytes: 16 << 20,
            max_connection_age: Duration::from_secs(30 * 60),
            insecure: false,
            retention: Duration::from_secs(7 * 24 * 3600),
            limits: LimitsConfig::default(),
            retry: RetryConfig::default(),
            tls: None,
            auth: AuthConfig::default(),
            queues: BTreeMap::new(),
            worker_ttl: crate::service::DEFAULT_WORKER_TTL,
            events_retention: Duration::from_secs(7 * 24 * 3600),
            sync_match_postgres: true,
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let l = Limits::default();
        LimitsConfig {
            max_payload_bytes: l.max_payload_bytes,
            max_checkpoint_bytes: l.max_checkpoint_bytes,
            max_result_bytes: l.max_result_bytes,
            default_lease: l.default_lease,
            min_lease: l.min_lease,
            max_lease: l.max_lease,
            max_wait: l.max_wait,
            max_lease_reply_bytes: l.max_lease_reply_bytes,
        }
    }
}

impl Default for RetryConfig {
    fn default() -> Self {
        let r = RetryPolicy::default();
        RetryConfig {
            max_attempts: r.max_attempts,
            initial_backoff: r.initial_backoff,
            multiplier: r.backoff_multiplier,
            max_backoff: r.max_backoff,
            jitter: r.jitter,
        }
    }
}

impl RetryConfig {
    fn policy(&self, what: &str) -> Result<RetryPolicy, String> {
        if self.max_attempts == 0 || self.max_attempts > Limits::default().max_attempts {
            return Err(format!("{what}.max_attempts must be between 1 and 1000"));
        }
        if !(1.0..=100.0).contains(&self.multiplier) {
            return Err(format!("{what}.multiplier must be between 1 and 100"));
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err(format!("{what}.jitter must be between 0 and 1"));
        }
        Ok(RetryPolicy {
            max_attempts: self.max_attempts,
            initial_backoff: self.initial_backoff,
            backoff_multiplier: self.multiplier,
            max_backoff: self.max_backoff,
            jitter: self.jitter,
        })
    }
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
    /// `sqlite://PATH` or `postgres://...` [default: sqlite://taskbroker.db].
    #[arg(long, env = "TASKBROKER_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Postgres connections per broker [default: 16].
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
    /// Bytes of payload, checkpoint and metadata one Lease reply carries at most;
    /// a reply always holds at least one task [default: 4194304, 4 MiB, every
    /// gRPC client's default receive limit].
    #[arg(long, env = "TASKBROKER_MAX_LEASE_REPLY_BYTES")]
    pub max_lease_reply_bytes: Option<usize>,
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
            "retry.max_attempts" => self.retry_max_attempts,
            "retry.initial_backoff" => self.retry_initial_backoff,
            "retry.multiplier" => self.retry_multiplier,
            "retry.max_backoff" => self.retry_max_backoff,
            "retry.jitter" => self.retry_jitter,
            "events_retention" => self.events_retention,
            "sync_match_postgres" => self.sync_match_postgres,
        );
        fig.extract::<Config>().map_err(|e| {
            // figment's message names the key and the source; keep it to one line.
            e.to_string().replace('\n', " ")
        })
    }
}

/// A validated configuration, ready to start.
pub struct Validated {
    pub app: AppConfig,
    pub shutdown_grace: Duration,
    pub retention: Duration,
}

fn read(path: &std::path::Path, what: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {what} {}: {e}", path.display()))
}

fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

impl Config {
    /// Checks every value, reads the TLS and token files, and builds the app's
    /// configuration. The error is one line.
    pub fn validate(&self) -> Result<Validated, String> {
        let l = &self.limits;
        if l.min_lease.is_zero() || l.min_lease > l.max_lease {
            return Err("limits.min_lease must be above zero and at most limits.max_lease".into());
        }
        if l.default_lease < l.min_lease || l.default_lease > l.max_lease {
            return Err("limits.default_lease must lie between min_lease and max_lease".into());
        }
        if self.reclaim_interval.is_zero() {
            return Err("reclaim_interval must be above zero".into());
        }
        if self.max_concurrent_requests == 0 {
            return Err("max_concurrent_requests must be at least 1".into());
        }
        if self.worker_ttl < crate::service::RECORD_EVERY {
            return Err(format!(
                "worker_ttl must be at least {}",
                humantime::format_duration(crate::service::RECORD_EVERY)
            ));
        }
        let limits = Limits {
            max_payload_bytes: l.max_payload_bytes,
            max_checkpoint_bytes: l.max_checkpoint_bytes,
            max_result_bytes: l.max_result_bytes,
            min_lease: l.min_lease,
            max_lease: l.max_lease,
            default_lease: l.default_lease,
            max_wait: l.max_wait,
            max_lease_reply_bytes: l.max_lease_reply_bytes,
            ..Limits::default()
        };
        let default_retry = self.retry.policy("retry")?;
        let mut queues = std::collections::HashMap::new();
        // Flow: dead-letter queues.
        let mut dead_letter_queues = BTreeMap::new();
        for (name, q) in &self.queues {
            if let Some(dlq) = &q.dead_letter_queue {
                validate::queue_name("dead_letter_queue", dlq).map_err(|e| {
                    format!(
                        "queues.{name}.dead_letter_queue: the queue name {}",
                        e.message
                    )
                })?;
                if dlq == name {
                    return Err(format!(
                        "queues.{name}.dead_letter_queue must name another queue"
                    ));
                }
                dead_letter_queues.insert(name.clone(), dlq.clone());
            }
        }
        let mut gates = std::collections::HashMap::new();
        for (name, q) in &self.queues {
            validate::queue_name("queue", name)
                .map_err(|e| format!("[queues.{name}]: the queue name {}", e.message))?;
            let retry = match &q.retry {
                Some(r) => r.policy(&format!("queues.{name}.retry"))?,
                None => default_retry,
            };
            let min_lease = q.min_lease.unwrap_or(l.min_lease);
            let max_lease = q.max_lease.unwrap_or(l.max_lease);
            if min_lease.is_zero() || min_lease > max_lease {
                return Err(format!(
                    "queues.{name}: min_lease must be above zero and at most max_lease"
                ));
            }
            let g = q.gates();
            g.validate().map_err(|e| {
                format!(
                    "queues.{name}.{}: {}",
                    e.field.trim_start_matches("config."),
                    e.message
                )
            })?;
            gates.insert(name.clone(), g);
            queues.insert(
                name.clone(),
                QueueSettings {
                    retry,
                    max_payload_bytes: q.max_payload_bytes.unwrap_or(l.max_payload_bytes),
                    min_lease,
                    max_lease,
                    retention: q.retention.unwrap_or(self.retention),
                    max_leases_per_worker: q.max_leases_per_worker.unwrap_or(0),
                },
            );
        }

        let mut auth = self.auth.tokens.clone();
        if let Some(path) = &self.auth.tokens_file {
            let text = read(path, "auth tokens file")?;
            let text = String::from_utf8(text)
                .map_err(|_| format!("auth tokens file {} is not UTF-8", path.display()))?;
            auth.extend(
                parse_token_file(&text)
                    .map_err(|e| format!("auth tokens file {}: {e}", path.display()))?,
            );
        }
        if auth.iter().any(|t| t.token.len() < 16) {
            return Err("auth tokens must be at least 16 characters long".into());
        }
        crate::domain::token::check_unique_names(&auth)?;
        if !is_loopback(&self.listen) && auth.is_empty() && !self.insecure {
            return Err(format!(
                "refusing to listen on {} without authentication: configure auth tokens, \
                 or pass --insecure when a service mesh or network policy protects the port",
                self.listen
            ));
        }
        let tls = match &self.tls {
            None => None,
            Some(t) => Some(TlsOptions {
                cert_pem: read(&t.cert, "TLS certificate")?,
                key_pem: read(&t.key, "TLS key")?,
                client_ca_pem: t
                    .client_ca
                    .as_deref()
                    .map(|p| read(p, "TLS client CA"))
                    .transpose()?,
            }),
        };
        let metrics_listen = match self.metrics_listen.trim() {
            "" | "off" => None,
            s => Some(s.parse::<SocketAddr>().map_err(|_| {
                format!("metrics_listen {s:?} is not an address like 127.0.0.1:9090")
            })?),
        };
        // The HTTP port serves the console: the same loopback rule as the gRPC port.
        if let Some(m) = metrics_listen
            && !is_loopback(&m)
            && auth.is_empty()
            && !self.insecure
        {
            return Err(format!(
                "refusing to serve the console and /metrics on {m} without authentication: \
                 configure auth tokens, or pass --insecure when a service mesh or network \
                 policy protects the port"
            ));
        }
        let mut app = AppConfig::new(self.database_url.clone());
        app.listen = self.listen;
        app.db_max_connections = self.db_max_connections.max(1);
        app.reclaim_interval = self.reclaim_interval;
        app.settings = Settings {
            limits,
            default_retry,
            queues,
            retention: self.retention,
            worker_ttl: self.worker_ttl,
            flow: crate::service::FlowSettings {
                events_retention: self.events_retention,
                dead_letter_queues,
            },
            gates,
            live: Default::default(),
            sync_match_postgres: self.sync_match_postgres,
        };
        app.metrics_listen = metrics_listen;
        app.metrics_depth_max_age = self.metrics_depth_max_age;
        app.server = ServerOptions {
            request_timeout: self.request_timeout,
            max_concurrent_requests: self.max_concurrent_requests,
            max_message_bytes: self.max_message_bytes,
            max_connection_age: (!self.max_connection_age.is_zero())
                .then_some(self.max_connection_age),
            ..ServerOptions::default()
        };
        app.auth = auth;
        app.tls = tls;
        Ok(Validated {
            app,
            shutdown_grace: self.shutdown_grace,
            retention: self.retention,
        })
    }

    /// The configuration as TOML with secrets (tokens, database password) redacted.
    pub fn redacted_toml(&self) -> String {
        let mut c = self.clone();
        c.database_url = redact_url(&c.database_url);
        for t in &mut c.auth.tokens {
            t.token = "<redacted>".into();
        }
        toml::to_string_pretty(&c).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }
}

/// The URL without its password.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let userinfo = &url[s + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}://{user}:***@{}", &url[..s], &url[at + 1..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> ServeArgs {
        ServeArgs::default()
    }

    #[test]
    fn defaults_validate_on_loopback() {
        let c = args().load().unwrap();
        assert_eq!(c.listen.port(), 50051);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = tempfile_dir();
        let path = dir.join("tb.toml");
        std::fs::write(
            &path,
            "reclaim_interval = \"2s\"\nretention = \"1h\"\n[retry]\nmax_attempts = 9\n\
             [queues.emails]\nmax_payload_bytes = 10\n",
        )
        .unwrap();
        let mut a = args();
        a.config = Some(path);
        a.retry_max_attempts = Some(4);
        let c = a.load().unwrap();
        assert_eq!(c.reclaim_interval, Duration::from_secs(2));
        assert_eq!(c.retry.max_attempts, 4);
        assert_eq!(c.queues["emails"].max_payload_bytes, Some(10));
        let v = c.validate().unwrap();
        assert_eq!(
            v.app.settings.queues["emails"].retention,
            Duration::from_secs(3600)
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_are_one_line_errors() {
        let dir = tempfile_dir();
        let path = dir.join("bad.toml");
        std::fs::write(&path, "no_such_key = 1\n").unwrap();
        let mut a = args();
        a.config = Some(path);
        let e = a.load().unwrap_err();
        assert!(e.contains("no_such_key") && !e.contains('\n'), "{e}");
        let mut a = args();
        a.retry_jitter = Some(3.0);
        assert!(
            a.load()
                .unwrap()
                .validate()
                .err()
                .unwrap()
                .contains("jitter")
        );
    }

    #[test]
    fn a_public_address_needs_auth_or_insecure() {
        let mut a = args();
        a.listen = Some("0.0.0.0:50051".parse().unwrap());
        let e = a.load().unwrap().validate().err().unwrap();
        assert!(e.contains("--insecure"), "{e}");
        a.insecure = Some(true);
        assert!(a.load().unwrap().validate().is_ok());
    }

    #[test]
    fn a_public_console_port_needs_auth_or_insecure() {
        let mut a = args();
        a.metrics_listen = Some("0.0.0.0:9090".into());
        let e = a.load().unwrap().validate().err().unwrap();
        assert!(e.contains("console") && e.contains("--insecure"), "{e}");
        a.insecure = Some(true);
        assert!(a.load().unwrap().validate().is_ok());
    }

    #[test]
    fn printed_config_hides_secrets() {
        let mut c = Config {
            database_url: "postgres://tb:hunter2@db/tb".into(),
            ..Config::default()
        };
        c.auth.tokens.push(TokenEntry {
            role: crate::domain::token::Role::Admin,
            token: "super-secret-token-value".into(),
            name: None,
        });
        let s = c.redacted_toml();
        assert!(!s.contains("hunter2") && !s.contains("super-secret"), "{s}");
        assert!(s.contains("postgres://tb:***@db/tb"));
    }

    #[test]
    fn queue_tables_seed_admission_gates() {
        let dir = tempfile_dir();
        let path = dir.join("tb.toml");
        std::fs::write(
            &path,
            "[queues.mail]\nmax_concurrent = 5\nrate_limit = { per_second = 2.5 }\n\
             fairness = \"round_robin_keys\"\npriority_aging = \"30s\"\n\
             [queues.bad]\nrate_limit = { per_second = -1.0 }\n",
        )
        .unwrap();
        let mut a = args();
        a.config = Some(path);
        let mut c = a.load().unwrap();
        let Err(bad) = c.validate() else {
            panic!("a negative rate is refused")
        };
        assert_eq!(
            bad,
            "queues.bad.rate_limit.per_second: must be above 0 and at most 1000000"
        );
        c.queues.remove("bad");
        let v = c.validate().unwrap();
        let g = &v.app.settings.gates["mail"];
        assert_eq!(g.max_concurrent, 5);
        assert_eq!(g.rate_limit.unwrap().per_second, 2.5);
        assert_eq!(
            g.fairness,
            crate::domain::admission::Fairness::RoundRobinKeys
        );
        assert_eq!(g.priority_aging_ms, Some(30_000));
        assert!(g.gated());
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "tb-config-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
