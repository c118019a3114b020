//! Validation: every value checked before any port is bound (one-line errors),
//! the TLS and token files read, and the app's configuration built from it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::{Config, QueueConfig, RetryConfig};
use crate::app::{AppConfig, ServerOptions, TlsOptions};
use crate::domain::RetryPolicy;
use crate::domain::token::parse_token_file;
use crate::domain::validate::{self, Limits};
use crate::service::{QueueSettings, Settings};

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
            max_pending: self.max_pending.unwrap_or_default(),
            max_pending_bytes: self.max_pending_bytes.unwrap_or_default(),
            ..Default::default()
        }
    }

    /// `bucket`, checked as UpdateQueue checks it; blank: none.
    fn bucket(&self, name: &str) -> Result<Option<String>, String> {
        match self.bucket.as_deref() {
            None | Some("") => Ok(None),
            Some(b) => crate::domain::bucket::bucket_name("bucket", b)
                .map(|()| Some(b.to_string()))
                .map_err(|e| format!("queues.{name}.bucket: {}", e.message)),
        }
    }

    /// `payload_schema` or the text of `payload_schema_file`, checked as
    /// UpdateQueue checks a schema (size, then that it compiles); blank: none.
    fn payload_schema(&self, name: &str) -> Result<Option<String>, String> {
        let (key, text) = match (&self.payload_schema, &self.payload_schema_file) {
            (None, None) => return Ok(None),
            (Some(_), Some(_)) => {
                return Err(format!(
                    "queues.{name}: set payload_schema or payload_schema_file, not both"
                ));
            }
            (Some(t), None) => (format!("queues.{name}.payload_schema"), t.clone()),
            (None, Some(p)) => {
                let key = format!("queues.{name}.payload_schema_file {}", p.display());
                (key.clone(), read_schema(p, &key)?)
            }
        };
        if text.is_empty() {
            return Ok(None);
        }
        crate::service::validate_schema(&text).map_err(|e| format!("{key}: {}", e.message))?;
        Ok(Some(text))
    }
}

/// A schema file's text, without the whitespace around it. The file's size
/// is the schema's for the limit; at most one byte past it is read, so a huge
/// file is refused without being read whole.
fn read_schema(path: &std::path::Path, key: &str) -> Result<String, String> {
    use std::io::Read;
    let limit = crate::domain::payload_schema::MAX_PAYLOAD_SCHEMA_BYTES;
    let mut bytes = Vec::new();
    let mut file = std::fs::File::open(path).map_err(|e| format!("cannot read {key}: {e}"))?;
    file.by_ref()
        .take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {key}: {e}"))?;
    if bytes.len() > limit {
        let len = file
            .metadata()
            .map_or(0, |m| m.len())
            .max(bytes.len() as u64);
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        validate::size("", len, limit).map_err(|e| format!("{key}: {}", e.message))?;
    }
    let text = String::from_utf8(bytes).map_err(|_| format!("{key}: is not UTF-8"))?;
    Ok(text.trim().to_string())
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
        if let Some(o) = self
            .cors_allowed_origins
            .iter()
            .find(|o| !crate::api::connect::cors::is_origin(o))
        {
            return Err(format!(
                "cors_allowed_origins entry {o:?} is not an origin like https://console.example \
                 (scheme and host, no path, no wildcard)"
            ));
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
            max_cooldown: l.max_cooldown,
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
            let mut g = q.gates();
            g.bucket = q.bucket(name)?;
            g.payload_schema = q.payload_schema(name)?;
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
        if !(1..=16).contains(&self.mysql_jobs_in_flight) {
            return Err(format!(
                "mysql_jobs_in_flight must be between 1 and 16, got {}",
                self.mysql_jobs_in_flight
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
            mysql_jobs_in_flight: self.mysql_jobs_in_flight as usize,
            limit_queues: Default::default(),
            schemas: Default::default(),
        };
        app.metrics_listen = metrics_listen;
        app.metrics_depth_max_age = self.metrics_depth_max_age;
        app.server = ServerOptions {
            request_timeout: self.request_timeout,
            max_concurrent_requests: self.max_concurrent_requests,
            max_message_bytes: self.max_message_bytes,
            max_connection_age: (!self.max_connection_age.is_zero())
                .then_some(self.max_connection_age),
            cors_allowed_origins: self.cors_allowed_origins.clone(),
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
}
