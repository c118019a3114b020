//! The configuration as the TOML file gives it: the effective `Config` (its
//! field names are the file's keys), the tables inside it, the built-in
//! defaults, and the configuration printed back with its secrets redacted.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::domain::RetryPolicy;
use crate::domain::token::TokenEntry;
use crate::domain::validate::Limits;

/// The effective configuration. Field names are the TOML keys.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// gRPC listen address; port 0 picks a free port.
    pub listen: SocketAddr,
    /// `sqlite://PATH` (one broker), `postgres://USER:PASS@HOST/DB` or
    /// `mysql://USER:PASS@HOST/DB` (MySQL 8.0+ or MariaDB 10.6+; several replicas).
    pub database_url: String,
    /// Postgres or MySQL/MariaDB connections per broker.
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
    /// Origins (exact, like `https://console.example`) whose browser pages may call
    /// the gRPC port across origins (HTTP/JSON, gRPC-Web); none by default.
    pub cors_allowed_origins: Vec<String>,
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
    /// MySQL/MariaDB: how many settle jobs, and how many lease jobs of the same
    /// queues, a broker runs at once (1 to 16); requests that arrive while they
    /// all run wait and share the next one.
    pub mysql_jobs_in_flight: u32,
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
    /// The longest cooldown a worker's Fail may set (`FailRequest.cooldown`);
    /// a longer one is refused.
    #[serde(with = "humantime_serde")]
    pub max_cooldown: Duration,
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
    /// A file of `ROLE TOKEN [NAME [workers=ID,PREFIX*,...] [queues=QUEUE,PREFIX*,...]]`
    /// lines (a mounted secret).
    pub tokens_file: Option<PathBuf>,
    /// Tokens given inline: `{ role, token, name, workers = [...], queues = [...] }`
    /// (`workers` and `queues` bind a worker token; docs/semantics.md, "Access control").
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
    /// Backpressure: Submit refuses tasks beyond this many waiting ones; 0 = no limit.
    /// Checked against a count at most 1 s old plus what this broker admitted and
    /// leased since: the queue may pass it by what entered it otherwise within that
    /// second (with N brokers, up to N times the limit at worst; docs/semantics.md).
    pub max_pending: Option<u64>,
    /// Backpressure: as max_pending, for their payload bytes (the same overshoot).
    pub max_pending_bytes: Option<u64>,
    /// The limit bucket of this queue's tasks that name none themselves
    /// (`[A-Za-z0-9._:-]`, at most 128); it limits nothing until it is defined.
    pub bucket: Option<String>,
    /// A JSON Schema document every submitted payload must match, as a string
    /// (at most 65536 bytes; no remote `$ref`s).
    pub payload_schema: Option<String>,
    /// A file holding the payload schema (instead of `payload_schema`), read at start-up.
    pub payload_schema_file: Option<PathBuf>,
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
            cors_allowed_origins: Vec::new(),
            retention: Duration::from_secs(7 * 24 * 3600),
            limits: LimitsConfig::default(),
            retry: RetryConfig::default(),
            tls: None,
            auth: AuthConfig::default(),
            queues: BTreeMap::new(),
            worker_ttl: crate::service::DEFAULT_WORKER_TTL,
            events_retention: Duration::from_secs(7 * 24 * 3600),
            sync_match_postgres: true,
            mysql_jobs_in_flight: crate::service::DEFAULT_MYSQL_JOBS_IN_FLIGHT,
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
            max_cooldown: l.max_cooldown,
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

impl Config {
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
