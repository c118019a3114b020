//! Broker semantics, one file per operation. The service validates requests,
//! applies the rules in `domain`, calls the `Store`, and wakes long-polls. It knows
//! nothing of gRPC: `api` turns its errors into statuses.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::dispatch::Dispatcher;
use crate::domain::RetryPolicy;
use crate::domain::validate::Limits;
use crate::metrics::Metrics;
use chrono::{DateTime, Utc};

use crate::store::{CompleteParams, Completed, LeaseParams, Settled, Store, TaskRecord};
use combine::Combiner;

mod admin;
mod backlog;
mod buckets;
pub use buckets::{BucketView, LimitQueues, LiveLimits, apply_bucket_mask};
mod clock;
mod combine;
mod error;
// Flow: dependencies, events, bulk operations; the watch stream.
mod events;
mod flow;
mod heartbeat;
mod holders;
mod lease;
mod observe;
// Backpressure on Submit.
mod payload_schema;
mod pending;
mod settle;
mod submit;
mod submit_spec;
// Schedules.
mod schedule;
mod schedule_fire;
// Routing: the worker registry.
mod workers;
// Admission: live queue settings and Explain.
mod admission;
mod explain;
// Sync match: Submit hands tasks to waiting long-polls.
mod sync_match;
// lease_next: a settle that leases the next tasks.
mod lease_next;

pub use admin::{ListTasks, TaskPage, UpdateTask};
pub use admission::{LiveQueue, LiveQueues, QueueView, REFRESH_INTERVAL, apply_mask};
pub use backlog::Backlog;
pub use clock::{Clock, ManualClock, SystemClock};
pub use error::ServiceError;
pub use events::{EventHub, WatchFilter};
pub use explain::Explained;
pub use flow::BulkOutcome;
pub use heartbeat::CheckpointRequest;
pub use holders::HeldBy;
pub use lease::LeaseRequest;
pub use observe::{Overview, QueueOverview, REQUEUE_BATCH, Throughput, percentile};
pub use payload_schema::{SchemaCache, validate_schema};
pub use schedule::{Caller, ScheduleInput, SchedulePage, SpecInput, TemplateInput};
pub use schedule_fire::{FIRE_TIME_KEY, FireStep, RunPage, RunView, SCHEDULE_ID_KEY};
pub use settle::{CompleteItem, CompleteOutcome, FailRequest};
pub use submit::{
    AT_MOST_ONCE_KEY, DuplicateKey, PRODUCER_KEY, RetrySpec, StickySpec, SubmitTask, Submitted,
    is_at_most_once,
};
pub use workers::{ListWorkers, RECORD_EVERY, WorkerPage};

/// Broker-wide settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub limits: Limits,
    /// Applied to the fields a task's retry policy leaves unset.
    pub default_retry: RetryPolicy,
    /// Per-queue overrides.
    pub queues: HashMap<String, QueueSettings>,
    /// Finished tasks are deleted this long after they finish; zero keeps them.
    pub retention: Duration,
    /// ListWorkers shows the workers seen this recently (routing).
    pub worker_ttl: Duration,
    /// Admission: the gates the configuration gives queues (`[queues.X]`).
    pub gates: HashMap<String, crate::domain::admission::QueueConfig>,
    /// Admission: every queue's live settings (stored in the database; the
    /// fields above seed them), read by the per-queue methods below.
    pub live: LiveQueues,
    /// Sync match on Postgres: on unless turned off (`sync_match_postgres`
    /// in the configuration, `--sync-match-postgres false`). SQLite always sync-matches.
    pub sync_match_postgres: bool,
    /// Settle jobs, and lease jobs of the same queues, run at once on a store
    /// with `parallel_writes` (MySQL); one elsewhere.
    pub mysql_jobs_in_flight: usize,
    /// Flow: event retention and dead-letter queues.
    pub flow: FlowSettings,
    /// Limit buckets and cooldowns: the queues they make gated.
    pub limit_queues: LiveLimits,
    /// Payload schemas: each queue's compiled `payload_schema`.
    pub schemas: SchemaCache,
}

/// Flow settings.
#[derive(Debug, Clone, Default)]
pub struct FlowSettings {
    /// Task events are deleted this long after they were recorded; zero keeps them.
    pub events_retention: Duration,
    /// Per queue: where a notice goes when one of its tasks goes DEAD.
    pub dead_letter_queues: std::collections::BTreeMap<String, String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            limits: Limits::default(),
            default_retry: RetryPolicy::default(),
            queues: HashMap::new(),
            retention: Duration::ZERO,
            worker_ttl: DEFAULT_WORKER_TTL,
            gates: HashMap::new(),
            live: LiveQueues::default(),
            sync_match_postgres: true,
            mysql_jobs_in_flight: DEFAULT_MYSQL_JOBS_IN_FLIGHT as usize,
            flow: FlowSettings::default(),
            limit_queues: LiveLimits::default(),
            schemas: SchemaCache::default(),
        }
    }
}

/// The default of `worker_ttl`.
pub const DEFAULT_WORKER_TTL: Duration = Duration::from_secs(300);

/// The settings of one queue that has overrides.
#[derive(Debug, Clone)]
pub struct QueueSettings {
    pub retry: RetryPolicy,
    pub max_payload_bytes: usize,
    pub min_lease: Duration,
    pub max_lease: Duration,
    pub retention: Duration,
    /// Leases of this queue one worker may hold at most; 0 means no cap (routing).
    pub max_leases_per_worker: u32,
}

impl Settings {
    // The per-queue reads take the live settings (admission).

    /// The retry defaults of a queue.
    pub fn retry_for(&self, queue: &str) -> RetryPolicy {
        self.live
            .snapshot()
            .get(queue)
            .map_or(self.default_retry, |q| q.settings.retry)
    }

    pub fn max_payload_for(&self, queue: &str) -> usize {
        self.live
            .snapshot()
            .get(queue)
            .map_or(self.limits.max_payload_bytes, |q| {
                q.settings.max_payload_bytes
            })
    }

    /// Whether some queue narrows the broker's lease bounds.
    pub fn has_lease_overrides(&self) -> bool {
        self.live.snapshot().values().any(|q| {
            q.settings.min_lease > self.limits.min_lease
                || q.settings.max_lease < self.limits.max_lease
        })
    }

    /// Lease bounds that hold for every one of `queues`.
    pub fn lease_bounds(&self, queues: &[String]) -> (Duration, Duration) {
        let mut min = self.limits.min_lease;
        let mut max = self.limits.max_lease;
        let live = self.live.snapshot();
        for q in queues.iter().filter_map(|q| live.get(q)) {
            min = min.max(q.settings.min_lease);
            max = max.min(q.settings.max_lease);
        }
        (min, max)
    }

    /// The per-worker caps of those of `queues` that have one (routing),
    /// from the live settings (UpdateQueue changes them at run time).
    pub fn worker_caps(&self, queues: &[String]) -> std::collections::BTreeMap<String, u32> {
        let live = self.live.snapshot();
        queues
            .iter()
            .filter_map(|q| {
                let cap = live.get(q)?.settings.max_leases_per_worker;
                (cap > 0).then(|| (q.clone(), cap))
            })
            .collect()
    }
}

/// The broker: shared by every RPC handler and the maintenance loop.
pub struct Broker {
    store: Arc<dyn Store>,
    dispatch: Arc<Dispatcher>,
    clock: Arc<dyn Clock>,
    settings: Settings,
    metrics: Arc<Metrics>,
    /// Group commit above the store (see `combine`).
    leases: Arc<Combiner<Vec<String>, LeaseParams, Vec<TaskRecord>>>,
    submits: Arc<Combiner<(), SubmitBatch, Vec<sync_match::Submitted>>>,
    completes: Arc<Combiner<(), Vec<CompleteParams>, Vec<Settled<Completed>>>>,
    /// The next scheduled run_at of a queue set, asked for at a time.
    next_runs: Arc<Combiner<Vec<String>, Time, Option<Time>>>,
    /// What this broker last wrote to the worker registry (routing).
    workers: workers::Registry,
    /// Long-polls a Submit may hand its tasks to (sync match).
    parked: Arc<sync_match::Parked>,
    /// Flow: the fan-out of the event log to WatchTasks calls.
    events: Arc<events::EventHub>,
    /// Backpressure: each limited queue's view of its waiting tasks.
    pending: pending::Pending,
}

type Time = DateTime<Utc>;

use sync_match::SubmitBatch;

/// Settle and lease jobs a MySQL broker runs at once unless configured: one,
/// since three cost MariaDB twice the CPU per lifecycle when measured
/// (docs/performance.md).
pub const DEFAULT_MYSQL_JOBS_IN_FLIGHT: u32 = 1;

/// Store calls combined at most: requests, and tasks.
const MAX_COMBINED_REQUESTS: usize = 256;
const MAX_COMBINED_TASKS: usize = 4096;

impl Broker {
    pub fn new(
        store: Arc<dyn Store>,
        dispatch: Arc<Dispatcher>,
        clock: Arc<dyn Clock>,
        settings: Settings,
        metrics: Arc<Metrics>,
    ) -> Self {
        // Admission: the configuration's queues until the database is read.
        settings.seed_live();
        // Settles and leases run several at once where row locks keep them apart.
        let in_flight = if store.capabilities().parallel_writes {
            settings.mysql_jobs_in_flight
        } else {
            1
        };
        Broker {
            events: events::EventHub::new(store.clone()),
            store,
            dispatch,
            clock,
            settings,
            metrics,
            leases: Arc::new(Combiner::with_in_flight(
                MAX_COMBINED_REQUESTS,
                MAX_COMBINED_TASKS,
                in_flight,
            )),
            submits: Arc::new(Combiner::new(MAX_COMBINED_REQUESTS, MAX_COMBINED_TASKS)),
            completes: Arc::new(Combiner::with_in_flight(
                MAX_COMBINED_REQUESTS,
                MAX_COMBINED_TASKS,
                in_flight,
            )),
            next_runs: Arc::new(Combiner::new(usize::MAX, usize::MAX)),
            workers: workers::Registry::default(),
            parked: Arc::default(),
            pending: pending::Pending::default(),
        }
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.dispatch
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Flow: the watch stream's fan-out.
    pub fn events(&self) -> &Arc<events::EventHub> {
        &self.events
    }
}
