//! Admission: live queue settings (ExplainTask is in `explain`).
//!
//! Every queue's settings are stored in the database (`queues`), seeded from the
//! configuration's `[queues.X]` tables, and held in memory as a snapshot that
//! every replica reloads twice a second (and at once after its own updates), so
//! an update is applied everywhere within a second. The snapshot decides which
//! lease a queue takes: the plain statement when it has no gates, the gated one
//! (`Store::task_lease_gated`, which reads the settings from the row it locks)
//! otherwise. Per-queue reads (retry defaults, payload limit, lease bounds,
//! retention) take the snapshot's values.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::{Broker, QueueSettings, ServiceError, Settings};
use crate::domain::RetryPolicy;
use crate::domain::admission::{QueueConfig, RetryOverride};
use crate::domain::validate::{self, Invalid};
use crate::store::{StoreResult, StoredQueue};

/// How often every replica reloads the stored settings.
pub const REFRESH_INTERVAL: Duration = Duration::from_millis(500);

/// One queue's live settings: as stored, and resolved against the broker's defaults.
#[derive(Debug, Clone)]
pub struct LiveQueue {
    pub config: QueueConfig,
    pub settings: QueueSettings,
    pub default_lease: Duration,
    pub updated_at: Option<DateTime<Utc>>,
    pub version: i64,
}

/// The in-memory snapshot of every queue's live settings, shared by the handlers.
#[derive(Debug, Clone, Default)]
pub struct LiveQueues(Arc<RwLock<Arc<HashMap<String, LiveQueue>>>>);

impl LiveQueues {
    /// The current snapshot (cheap: one read lock and a reference count).
    pub fn snapshot(&self) -> Arc<HashMap<String, LiveQueue>> {
        // A poisoned lock still holds a whole map (it is only ever replaced).
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn replace(&self, map: HashMap<String, LiveQueue>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(map);
    }

    fn insert(&self, name: String, q: LiveQueue) {
        let mut guard = self.0.write().unwrap_or_else(|p| p.into_inner());
        let mut map = (**guard).clone();
        map.insert(name, q);
        *guard = Arc::new(map);
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Settings {
    /// A stored config resolved against the broker's defaults.
    pub fn resolve(&self, c: &QueueConfig) -> LiveQueue {
        let d = &self.default_retry;
        let r = &c.retry;
        let l = &self.limits;
        let millis = |v: Option<u64>, default: Duration| v.map_or(default, Duration::from_millis);
        let min_lease = millis(c.min_lease_ms, l.min_lease);
        let max_lease = millis(c.max_lease_ms, l.max_lease);
        LiveQueue {
            config: c.clone(),
            settings: QueueSettings {
                retry: RetryPolicy {
                    max_attempts: r.max_attempts.unwrap_or(d.max_attempts),
                    initial_backoff: millis(r.initial_backoff_ms, d.initial_backoff),
                    backoff_multiplier: r.backoff_multiplier.unwrap_or(d.backoff_multiplier),
                    max_backoff: millis(r.max_backoff_ms, d.max_backoff),
                    jitter: r.jitter.unwrap_or(d.jitter),
                },
                max_payload_bytes: c.max_payload_bytes.map_or(l.max_payload_bytes, |b| {
                    usize::try_from(b).unwrap_or(usize::MAX)
                }),
                min_lease,
                max_lease,
                retention: millis(c.retention_ms, self.retention),
                max_leases_per_worker: c.max_leases_per_worker,
            },
            // Bounds that do not overlap are refused by `validate_queue` (clamp would panic).
            default_lease: millis(c.default_lease_ms, l.default_lease)
                .max(min_lease)
                .min(max_lease),
            updated_at: None,
            version: 0,
        }
    }

    /// The stored form of a configured queue: the fields that differ from the
    /// broker's defaults, plus its gates.
    pub fn seed_config(&self, qs: &QueueSettings, gates: Option<&QueueConfig>) -> QueueConfig {
        let d = &self.default_retry;
        let r = &qs.retry;
        let l = &self.limits;
        let differs = |v: Duration, default: Duration| (v != default).then(|| ms(v));
        let mut c = gates.cloned().unwrap_or_default();
        c.retry = RetryOverride {
            max_attempts: (r.max_attempts != d.max_attempts).then_some(r.max_attempts),
            initial_backoff_ms: differs(r.initial_backoff, d.initial_backoff),
            backoff_multiplier: (r.backoff_multiplier != d.backoff_multiplier)
                .then_some(r.backoff_multiplier),
            max_backoff_ms: differs(r.max_backoff, d.max_backoff),
            jitter: (r.jitter != d.jitter).then_some(r.jitter),
        };
        c.max_payload_bytes =
            (qs.max_payload_bytes != l.max_payload_bytes).then_some(qs.max_payload_bytes as u64);
        c.min_lease_ms = differs(qs.min_lease, l.min_lease);
        c.max_lease_ms = differs(qs.max_lease, l.max_lease);
        c.retention_ms = differs(qs.retention, self.retention);
        // Routing: the cap of `[queues.X] max_leases_per_worker`.
        if c.max_leases_per_worker == 0 {
            c.max_leases_per_worker = qs.max_leases_per_worker;
        }
        c
    }

    /// The configuration's queues in their stored form.
    pub fn seed(&self) -> Vec<(String, QueueConfig)> {
        let mut names: Vec<&String> = self.queues.keys().chain(self.gates.keys()).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .map(|n| {
                let c = match self.queues.get(n) {
                    Some(qs) => self.seed_config(qs, self.gates.get(n)),
                    None => self.gates.get(n).cloned().unwrap_or_default(),
                };
                (n.clone(), c)
            })
            .collect()
    }

    /// Fills the snapshot from the configuration (before the database is read).
    pub(super) fn seed_live(&self) {
        let map = self
            .seed()
            .into_iter()
            .map(|(n, c)| (n, self.resolve(&c)))
            .collect();
        self.live.replace(map);
    }

    /// The live settings of a queue, when it has any stored.
    pub fn queue(&self, name: &str) -> Option<LiveQueue> {
        self.live.snapshot().get(name).cloned()
    }

    /// Whether any of `queues` has a gate (and takes the gated lease).
    pub fn gated(&self, queues: &[String]) -> bool {
        let live = self.live.snapshot();
        queues
            .iter()
            .any(|q| live.get(q).is_some_and(|l| l.config.gated()) || self.limit_queues.gates(q))
    }

    /// How often a long-poll over `queues` (some gated) looks again while it
    /// waits: every 250 ms, or sooner when a rate limit of theirs refills a
    /// quarter of its bucket sooner (never more often than every 50 ms, so
    /// waiting long-polls do not turn into a busy loop of gated leases).
    pub fn gated_recheck(&self, queues: &[String]) -> Duration {
        let live = self.live.snapshot();
        let quarter_refill = queues
            .iter()
            .filter_map(|q| live.get(q))
            .flat_map(|l| [l.config.rate_limit, l.config.per_key_rate_limit])
            .flatten()
            .map(|r| r.capacity() / r.per_second / 4.0)
            .fold(0.25_f64, f64::min);
        Duration::from_secs_f64(quarter_refill.clamp(0.05, 0.25))
    }

    /// The default lease duration of a lease over `queues`: the shortest that
    /// one of them sets, or the broker's.
    pub fn default_lease_for(&self, queues: &[String]) -> Duration {
        let live = self.live.snapshot();
        queues
            .iter()
            .filter_map(|q| live.get(q))
            .filter(|l| l.config.default_lease_ms.is_some())
            .map(|l| l.default_lease)
            .min()
            .unwrap_or(self.limits.default_lease)
    }

    /// The retention of every queue that has live settings.
    pub fn queue_retention(&self) -> Vec<(String, Duration)> {
        self.live
            .snapshot()
            .iter()
            .map(|(n, q)| (n.clone(), q.settings.retention))
            .collect()
    }

    /// Checks a changed config against the broker's limits; the first problem
    /// names its field.
    pub fn validate_queue(&self, c: &QueueConfig) -> Result<(), Invalid> {
        c.validate()?;
        let lim = &self.limits;
        let r = &c.retry;
        if let Some(n) = r.max_attempts
            && (n == 0 || n > lim.max_attempts)
        {
            return Err(Invalid::new(
                "config.default_retry.max_attempts",
                format!("must be between 1 and {}", lim.max_attempts),
            ));
        }
        if let Some(m) = r.backoff_multiplier
            && !(1.0..=100.0).contains(&m)
        {
            return Err(Invalid::new(
                "config.default_retry.backoff_multiplier",
                "must be between 1 and 100",
            ));
        }
        if let Some(j) = r.jitter
            && !(0.0..=1.0).contains(&j)
        {
            return Err(Invalid::new(
                "config.default_retry.jitter",
                "must be between 0 and 1",
            ));
        }
        if c.max_payload_bytes == Some(0) {
            return Err(Invalid::new(
                "config.max_payload_bytes",
                "must be above zero",
            ));
        }
        let q = self.resolve(c);
        let s = &q.settings;
        if s.min_lease.is_zero() || s.min_lease < lim.min_lease {
            return Err(Invalid::new(
                "config.min_lease",
                format!("must be at least the broker's {:?}", lim.min_lease),
            ));
        }
        if s.max_lease > lim.max_lease {
            return Err(Invalid::new(
                "config.max_lease",
                format!("must be at most the broker's {:?}", lim.max_lease),
            ));
        }
        if s.min_lease > s.max_lease {
            return Err(Invalid::new(
                "config.min_lease",
                "must be at most max_lease",
            ));
        }
        if let Some(d) = c.default_lease_ms
            && (Duration::from_millis(d) < s.min_lease || Duration::from_millis(d) > s.max_lease)
        {
            return Err(Invalid::new(
                "config.default_lease",
                "must lie between min_lease and max_lease",
            ));
        }
        Ok(())
    }
}

/// Applies the fields an update mask names from `patch` to `config`.
pub fn apply_mask(
    config: &mut QueueConfig,
    patch: &QueueConfig,
    paths: &[String],
) -> Result<(), Invalid> {
    if paths.is_empty() {
        return Err(Invalid::new("update_mask", "must name at least one field"));
    }
    for path in paths {
        let (c, p) = (&mut *config, patch);
        match path.as_str() {
            "paused" => c.paused = p.paused,
            "max_concurrent" => c.max_concurrent = p.max_concurrent,
            "rate_limit" => c.rate_limit = p.rate_limit,
            "max_concurrent_per_key" => c.max_concurrent_per_key = p.max_concurrent_per_key,
            "per_key_rate_limit" => c.per_key_rate_limit = p.per_key_rate_limit,
            "fairness" => c.fairness = p.fairness,
            "priority_aging" => c.priority_aging_ms = p.priority_aging_ms,
            "max_leases_per_worker" => c.max_leases_per_worker = p.max_leases_per_worker,
            "default_retry" => c.retry = p.retry.clone(),
            "default_retry.max_attempts" => c.retry.max_attempts = p.retry.max_attempts,
            "default_retry.initial_backoff" => {
                c.retry.initial_backoff_ms = p.retry.initial_backoff_ms
            }
            "default_retry.backoff_multiplier" => {
                c.retry.backoff_multiplier = p.retry.backoff_multiplier
            }
            "default_retry.max_backoff" => c.retry.max_backoff_ms = p.retry.max_backoff_ms,
            "default_retry.jitter" => c.retry.jitter = p.retry.jitter,
            "default_lease" => c.default_lease_ms = p.default_lease_ms,
            "min_lease" => c.min_lease_ms = p.min_lease_ms,
            "max_lease" => c.max_lease_ms = p.max_lease_ms,
            "max_payload_bytes" => c.max_payload_bytes = p.max_payload_bytes,
            "retention" => c.retention_ms = p.retention_ms,
            "max_pending" => c.max_pending = p.max_pending,
            "max_pending_bytes" => c.max_pending_bytes = p.max_pending_bytes,
            "bucket" => c.bucket = p.bucket.clone(),
            "payload_schema" => c.payload_schema = p.payload_schema.clone(),
            other => {
                return Err(Invalid::new(
                    "update_mask",
                    format!("names {other:?}, which is not a field of QueueConfig"),
                ));
            }
        }
    }
    Ok(())
}

/// A queue's live settings as answered by GetQueue and friends.
#[derive(Debug, Clone)]
pub struct QueueView {
    pub name: String,
    pub live: LiveQueue,
}

/// Compare-and-set attempts of UpdateQueue before it reports a conflict.
const UPDATE_ATTEMPTS: usize = 5;

impl Broker {
    fn stored_to_live(&self, s: StoredQueue) -> (String, LiveQueue) {
        let mut live = self.settings.resolve(&s.config);
        live.updated_at = s.updated_at;
        live.version = s.version;
        (s.name, live)
    }

    /// Stores the configuration's queues (see `Store::queue_seed`) and loads the
    /// snapshot: called once at start-up, before the port serves.
    pub async fn queues_start(&self) -> StoreResult<()> {
        self.store.queue_seed(&self.settings.seed()).await?;
        self.queues_reload().await
    }

    /// Reloads the snapshot from the database.
    pub async fn queues_reload(&self) -> StoreResult<()> {
        let rows = self.store.queue_list().await?;
        let before = self.settings.live.snapshot();
        let map: HashMap<String, LiveQueue> =
            rows.into_iter().map(|s| self.stored_to_live(s)).collect();
        // A queue that lost a gate (resumed, widened) may have waiting long-polls.
        for (name, q) in &map {
            if before
                .get(name)
                .is_some_and(|b| b.version != q.version && b.config.gated())
            {
                self.dispatch.wake_n(Some(name), usize::MAX);
            }
        }
        self.settings.live.replace(map);
        // Limit buckets and cooldowns: which queues they make gated.
        self.limits_reload().await
    }

    /// Reloads the snapshot every [`REFRESH_INTERVAL`] until `stop`.
    pub async fn queues_refresh(self: Arc<Self>, stop: CancellationToken) {
        let mut ticks = crate::maintenance::Ticker::new(REFRESH_INTERVAL, stop);
        let mut failing = false;
        while ticks.next().await {
            match self.queues_reload().await {
                Ok(()) => failing = false,
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "cannot reload the queue settings; keeping the last");
                }
                Err(_) => {}
            }
        }
    }

    /// Wakes a long-poll of a gated queue whose lease just ended (the gate may
    /// admit another now).
    pub(super) fn wake_gated(&self, queue: &str) {
        if self
            .settings
            .gated(std::slice::from_ref(&queue.to_string()))
        {
            self.dispatch.wake(Some(queue));
        }
    }

    fn view(&self, name: &str) -> QueueView {
        let live = self
            .settings
            .queue(name)
            .unwrap_or_else(|| self.settings.resolve(&QueueConfig::default()));
        QueueView {
            name: name.to_string(),
            live,
        }
    }

    pub async fn get_queue(&self, name: &str) -> Result<QueueView, ServiceError> {
        validate::queue_name("name", name)?;
        Ok(self.view(name))
    }

    /// Every queue with stored settings or with tasks, by name.
    pub async fn list_queues(&self) -> Result<Vec<QueueView>, ServiceError> {
        let (stats, _) = self.queue_stats(Vec::new()).await?;
        let mut names: Vec<String> = self.settings.live.snapshot().keys().cloned().collect();
        names.extend(stats.into_iter().map(|s| s.queue));
        names.sort();
        names.dedup();
        Ok(names.iter().map(|n| self.view(n)).collect())
    }

    /// Changes the fields `paths` names; applied here at once and on every other
    /// replica within [`REFRESH_INTERVAL`].
    pub async fn update_queue(
        &self,
        name: &str,
        patch: &QueueConfig,
        paths: &[String],
    ) -> Result<QueueView, ServiceError> {
        validate::queue_name("name", name)?;
        // Checked once, here, for every caller (gRPC and the console).
        if paths.iter().any(|p| p == "payload_schema")
            && let Some(schema) = &patch.payload_schema
        {
            super::validate_schema(schema)?;
        }
        for _ in 0..UPDATE_ATTEMPTS {
            let current = self
                .store
                .queue_list()
                .await?
                .into_iter()
                .find(|q| q.name == name);
            let mut config = current
                .as_ref()
                .map(|q| q.config.clone())
                .unwrap_or_default();
            apply_mask(&mut config, patch, paths)?;
            self.settings.validate_queue(&config)?;
            let now = self.clock.now();
            let version = current.as_ref().map(|q| q.version);
            if self.store.queue_put(name, &config, version, now).await? {
                let (_, mut live) = self.stored_to_live(StoredQueue {
                    name: name.to_string(),
                    config,
                    updated_at: Some(now),
                    version: version.unwrap_or(0) + 1,
                });
                live.updated_at = Some(now);
                self.settings.live.insert(name.to_string(), live);
                // Resumed or widened: waiting long-polls look again.
                self.dispatch.wake_n(Some(name), usize::MAX);
                return Ok(self.view(name));
            }
        }
        Err(ServiceError::FailedPrecondition(format!(
            "queue {name} kept changing while this update was applied; try again"
        )))
    }
}
