//! Prometheus metrics (`taskbroker_` prefix, no task ids as labels). Counters and
//! histograms are updated where things happen; queue depths and pool usage are
//! read fresh at scrape time.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use crate::store::{PoolStats, QueueStatsRecord};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    pub queue: String,
}

/// A lease's queue and the rules it applied (`domain::explain::LeasePath`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeasedLabel {
    pub queue: String,
    pub path: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DepthLabel {
    pub queue: String,
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabel {
    pub method: String,
    pub code: &'static str,
}

#[derive(Clone)]
struct Buckets(fn() -> Histogram);

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        (self.0)()
    }
}

/// 1 ms to about 9 minutes.
fn seconds_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 20))
}

/// 100 us to about 52 s.
fn rpc_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 20))
}

type FloatGauge = Gauge<f64, AtomicU64>;

pub struct Metrics {
    registry: Registry,
    submitted: Family<QueueLabel, Counter>,
    submit_refused: Family<QueueLabel, Counter>,
    /// Backpressure: counts of a queue's waiting tasks read by Submit.
    pending_counted: Family<QueueLabel, Counter>,
    leased: Family<LeasedLabel, Counter>,
    completed: Family<QueueLabel, Counter>,
    failed: Family<QueueLabel, Counter>,
    dead: Family<QueueLabel, Counter>,
    reclaimed: Family<QueueLabel, Counter>,
    depth: Family<DepthLabel, Gauge>,
    oldest_ready: Family<QueueLabel, FloatGauge>,
    wait_time: Family<QueueLabel, Histogram, Buckets>,
    run_time: Family<QueueLabel, Histogram, Buckets>,
    rpc: Family<RpcLabel, Histogram, Buckets>,
    pool_size: Gauge,
    pool_idle: Gauge,
    waiters: Gauge,
    // How old the depths are, and the cross-replica wake-ups.
    depth_age: FloatGauge,
    notifications_received: Counter,
    notifications_own_skipped: Counter,
    /// Sync match: tasks handed to a waiting long-poll by Submit.
    sync_matched: Family<QueueLabel, Counter>,
    /// How long the oldest committed event has waited to become final.
    watch_lag: FloatGauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn q(queue: &str) -> QueueLabel {
    QueueLabel {
        queue: queue.to_string(),
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut m = Metrics {
            registry: Registry::with_prefix("taskbroker"),
            submitted: Family::default(),
            submit_refused: Family::default(),
            pending_counted: Family::default(),
            leased: Family::default(),
            completed: Family::default(),
            failed: Family::default(),
            dead: Family::default(),
            reclaimed: Family::default(),
            depth: Family::default(),
            oldest_ready: Family::default(),
            wait_time: Family::new_with_constructor(Buckets(seconds_buckets)),
            run_time: Family::new_with_constructor(Buckets(seconds_buckets)),
            rpc: Family::new_with_constructor(Buckets(rpc_buckets)),
            pool_size: Gauge::default(),
            pool_idle: Gauge::default(),
            waiters: Gauge::default(),
            depth_age: FloatGauge::default(),
            notifications_received: Counter::default(),
            notifications_own_skipped: Counter::default(),
            sync_matched: Family::default(),
            watch_lag: FloatGauge::default(),
        };
        let r = &mut m.registry;
        r.register(
            "tasks_submitted",
            "Tasks created by Submit",
            m.submitted.clone(),
        );
        r.register(
            "submit_refused",
            "Submit calls refused because the queue's max_pending or max_pending_bytes was reached",
            m.submit_refused.clone(),
        );
        r.register(
            "pending_counts",
            "Counts of a queue's waiting tasks read by Submit's max_pending check (about one a second per queue and broker)",
            m.pending_counted.clone(),
        );
        r.register(
            "tasks_leased",
            "Leases granted, by queue and by the rules the lease applied (path: plain, routed, gated, matched)",
            m.leased.clone(),
        );
        r.register("tasks_completed", "Tasks completed", m.completed.clone());
        r.register(
            "tasks_failed",
            "Attempts reported failed by workers",
            m.failed.clone(),
        );
        r.register("tasks_dead", "Tasks that failed for good", m.dead.clone());
        r.register(
            "leases_reclaimed",
            "Expired leases reclaimed",
            m.reclaimed.clone(),
        );
        r.register("queue_depth", "Tasks per queue and state", m.depth.clone());
        r.register(
            "queue_oldest_ready_age_seconds",
            "Age of the oldest READY task",
            m.oldest_ready.clone(),
        );
        r.register(
            "task_wait_seconds",
            "Time from READY to leased",
            m.wait_time.clone(),
        );
        r.register(
            "task_run_seconds",
            "Time from leased to Complete or Fail",
            m.run_time.clone(),
        );
        r.register(
            "rpc_duration_seconds",
            "gRPC call latency by method and status code",
            m.rpc.clone(),
        );
        r.register(
            "db_pool_connections",
            "Open database connections",
            m.pool_size.clone(),
        );
        r.register(
            "db_pool_idle_connections",
            "Idle database connections",
            m.pool_idle.clone(),
        );
        r.register(
            "lease_waiters",
            "Lease long-polls waiting for work",
            m.waiters.clone(),
        );
        r.register(
            "queue_depth_age_seconds",
            "Age of the count behind queue_depth and queue_oldest_ready_age_seconds",
            m.depth_age.clone(),
        );
        r.register(
            "notifications_received",
            "Wake-up notifications received from the database (Postgres LISTEN)",
            m.notifications_received.clone(),
        );
        r.register(
            "notifications_own_skipped",
            "Of those, the ones this replica sent itself and did not act on again",
            m.notifications_own_skipped.clone(),
        );
        r.register(
            "tasks_sync_matched",
            "Tasks inserted already leased to a waiting long-poll (also counted as leased)",
            m.sync_matched.clone(),
        );
        r.register(
            "watch_lag_seconds",
            "How long the oldest committed event has waited before WatchTasks can deliver it",
            m.watch_lag.clone(),
        );
        m
    }

    /// The oldest committed event not yet final was recorded at `since` (ms).
    pub fn watch_lag(&self, since: Option<i64>, now: chrono::DateTime<chrono::Utc>) {
        let lag = since.map_or(0.0, |t| {
            ((now.timestamp_millis() - t).max(0)) as f64 / 1000.0
        });
        self.watch_lag.set(lag);
    }

    /// How old the depth snapshot shown by this scrape is (see `crate::depth`).
    pub fn depth_age(&self, age: Duration) {
        self.depth_age.set(age.as_secs_f64());
    }

    /// The store's notification counts so far (they only grow).
    pub fn notifications(&self, n: crate::store::NotificationStats) {
        let set = |c: &Counter, v: u64| {
            let have = c.get();
            if v > have {
                c.inc_by(v - have);
            }
        };
        set(&self.notifications_received, n.received);
        set(&self.notifications_own_skipped, n.own_skipped);
    }

    /// Sync match: a task handed to a waiting long-poll.
    pub fn sync_matched(&self, queue: &str) {
        self.sync_matched.get_or_create(&q(queue)).inc();
    }

    pub fn submitted(&self, queue: &str) {
        self.submitted.get_or_create(&q(queue)).inc();
    }

    /// A Submit refused by the queue's backpressure limits.
    pub fn submit_refused(&self, queue: &str) {
        self.submit_refused.get_or_create(&q(queue)).inc();
    }

    /// Backpressure: Submit read a count of the queue's waiting tasks.
    pub fn pending_counted(&self, queue: &str) {
        self.pending_counted.get_or_create(&q(queue)).inc();
    }

    pub fn leased(&self, queue: &str, path: crate::domain::explain::LeasePath, waited: Duration) {
        self.leased
            .get_or_create(&LeasedLabel {
                queue: queue.to_string(),
                path: path.as_str(),
            })
            .inc();
        self.wait_time
            .get_or_create(&q(queue))
            .observe(waited.as_secs_f64());
    }

    pub fn completed(&self, queue: &str, ran: Duration) {
        self.completed.get_or_create(&q(queue)).inc();
        self.run_time
            .get_or_create(&q(queue))
            .observe(ran.as_secs_f64());
    }

    pub fn failed(&self, queue: &str, ran: Duration, dead: bool) {
        self.failed.get_or_create(&q(queue)).inc();
        self.run_time
            .get_or_create(&q(queue))
            .observe(ran.as_secs_f64());
        if dead {
            self.dead.get_or_create(&q(queue)).inc();
        }
    }

    pub fn reclaimed(&self, queue: &str, n: u64, dead: u64) {
        self.reclaimed.get_or_create(&q(queue)).inc_by(n);
        if dead > 0 {
            self.dead.get_or_create(&q(queue)).inc_by(dead);
        }
    }

    pub fn rpc(&self, method: &str, code: &'static str, took: Duration) {
        let label = RpcLabel {
            method: method.to_string(),
            code,
        };
        self.rpc.get_or_create(&label).observe(took.as_secs_f64());
    }

    /// Sets the scrape-time gauges and renders the text exposition format.
    pub fn render(
        &self,
        stats: &[QueueStatsRecord],
        pool: PoolStats,
        waiters: usize,
        now: chrono::DateTime<chrono::Utc>,
    ) -> String {
        self.waiters.set(waiters as i64);
        self.depth.clear();
        self.oldest_ready.clear();
        for s in stats {
            for (state, n) in [
                ("scheduled", s.scheduled),
                ("ready", s.ready),
                ("leased", s.leased),
                ("succeeded", s.succeeded),
                ("dead", s.dead),
                ("cancelled", s.cancelled),
            ] {
                let label = DepthLabel {
                    queue: s.queue.clone(),
                    state,
                };
                self.depth.get_or_create(&label).set(n as i64);
            }
            let age = s
                .oldest_ready_at
                .and_then(|t| (now - t).to_std().ok())
                .unwrap_or_default();
            self.oldest_ready
                .get_or_create(&q(&s.queue))
                .set(age.as_secs_f64());
        }
        self.pool_size.set(i64::from(pool.size));
        self.pool_idle.set(pool.idle as i64);
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
