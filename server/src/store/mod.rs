//! The store: everything the broker needs from a database, and nothing of gRPC.
//!
//! The contract is split by capability, one trait per file, each beside its own
//! parameter and record types: [`Engine`] (the database itself), [`Tasks`]
//! (submit and read), [`Leasing`], [`Settling`], [`Flow`] (dependencies),
//! [`Events`], [`Schedules`], [`Admission`] (queue settings and their state),
//! [`Workers`] (the registry), [`Admin`] (an operator's changes, retention) and
//! [`Observe`] (reads for the console and metrics). [`Store`] is their union, so
//! the service holds one `Arc<dyn Store>`; `use store::prelude::*` brings the
//! capability traits into scope to call them.
//!
//! One implementation per database, each in a folder of the same shape
//! (`sqlite`, `postgres`, `mysql`), all three proven by the shared conformance
//! suite in `server/tests/store_conformance.rs`.
//!
//! Every method that depends on time takes `now`, so tests control the clock.
//! Timestamps are stored as milliseconds since the Unix epoch (BIGINT) in every
//! database, so the implementations share their row types and rules.

use crate::domain::{AttemptOutcome, StoredState, TaskState};

pub mod mysql;
pub mod postgres;
pub mod sqlite;

pub(crate) mod row;
// The filters of lists and bulk selections, as SQL terms.
pub(crate) mod filter;
// The gated lease's passes, over each backend's reads.
pub(crate) mod gated;
// Limit buckets and cooldowns: the rows, and what the gated lease makes of them.
pub mod buckets;
pub use buckets::{BucketPut, Buckets, CooldownPut, CooldownRecord, StoredBucket};
pub(crate) mod limits;

pub use crate::domain::model::*;

mod admin;
pub use admin::Admin;
mod engine;
pub use engine::Engine;
mod events;
pub use events::{EventRecord, Events};
mod leasing;
pub use leasing::Leasing;
mod settling;
pub use settling::Settling;
mod tasks;
pub use tasks::Tasks;
mod observe;
pub use observe::*;
mod schedule_steps;
mod schedules;
pub use schedules::{
    DueSchedule, Fired, FiredRun, NewRun, ScheduleFilter, ScheduleFire, ScheduleRecord,
    ScheduleRunFilter, ScheduleRunRecord, Schedules, TaskTemplate,
};
// The worker registry and the routing of a lease.
mod workers;
pub(crate) use workers::WorkerRow;
pub use workers::{
    LeaseRouting, WorkerFilter, WorkerLeaseRecord, WorkerRecord, WorkerSeen, Workers,
};
pub mod admission;
pub use admission::{Admission, QueueUsage, StoredQueue};
pub mod sync_match;
pub use sync_match::{MatchTo, MatchedInsert};
mod flow;
pub use flow::{
    BulkCancelled, BulkFilter, Flow, FlowInserted, FlowSpec, MAX_WAITS_PER_KEY, TaskFlowInfo,
};
// REPLACE_WAITING.
mod replace;
pub use replace::Replacement;

// The statements of every backend, from its `.sql` files.
pub mod sql;

// The lease reply bound as SQL.
pub(crate) mod reply;
pub(crate) use replace::merged_metadata;

/// The capability traits, to call a [`Store`]'s methods: `use store::prelude::*`.
pub mod prelude {
    pub use super::{
        Admin, Admission, Buckets, Engine, Events, Flow, Leasing, Observe, Schedules, Settling,
        Store, Tasks, Workers,
    };
}

/// A store failure, classified for the caller.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached now; the request may be retried.
    #[error("database unavailable")]
    Unavailable(#[source] BoxError),
    /// Anything else.
    #[error("database error")]
    Internal(#[source] BoxError),
    /// Stored data that the broker cannot read back.
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// Migrations could not be applied.
    #[error("migration failed")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    /// The database URL is wrong, none of its hosts is of the kind it asks
    /// for, or the database refused a migration (one line, for the operator).
    #[error("{0}")]
    Config(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        let unavailable = match &e {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed => true,
            // With TLS built in, sqlx opens each connection with an SSLRequest; a
            // connection the network drops before Postgres answers reads as a 0x00
            // answer, i.e. this protocol error. It is an outage, not a bug.
            sqlx::Error::Protocol(m) => m.starts_with("unexpected response from SSLRequest"),
            sqlx::Error::Database(db) => matches!(
                db.code().as_deref(),
                // Postgres: admin/crash shutdown, cannot connect now, too many
                // connections, disk full, out of memory; a write on a host that
                // became a standby (read-only transaction) during a failover.
                Some("57P01" | "57P02" | "57P03" | "53300" | "53100" | "53200" | "08006" | "08001" | "08004" | "25006")
                // Postgres and MySQL: a deadlock or a serialization failure; the
                // transaction was rolled back whole, so the call may be sent again.
                | Some("40P01" | "40001")
                // SQLite: busy, locked.
                | Some("5" | "6" | "517" | "261")
                // MySQL/MariaDB: lost connection to the server, server shutdown.
                | Some("08S01")
            ),
            _ => false,
        };
        if unavailable {
            StoreError::Unavailable(Box::new(e))
        } else {
            StoreError::Internal(Box::new(e))
        }
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode::{DatabaseBusy, DatabaseLocked, DiskFull, SystemIoFailure};
        match e.sqlite_error_code() {
            Some(DatabaseBusy | DatabaseLocked | SystemIoFailure | DiskFull) => {
                StoreError::Unavailable(Box::new(e))
            }
            _ => StoreError::Internal(Box::new(e)),
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// The database driver's error behind a `StoreError`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The database host is a standby (in recovery): it answers, and refuses every
/// write. A readiness check says so inside [`StoreError::Unavailable`].
#[derive(Debug, thiserror::Error)]
#[error("the database host is a standby (in recovery)")]
pub struct InRecovery;

impl StoreError {
    /// Whether the database answered as a standby (see [`InRecovery`]).
    pub fn is_standby(&self) -> bool {
        matches!(self, StoreError::Unavailable(e) if e.is::<InRecovery>())
    }
}

/// Called with a queue that has a newly pending task, or `None` for "maybe any queue".
pub type Waker = std::sync::Arc<dyn Fn(Option<&str>) + Send + Sync>;

/// The database behind the broker: the union of its capabilities, so the service
/// holds one `Arc<dyn Store>`. Every type that has them all is a `Store`.
pub trait Store:
    Engine
    + Tasks
    + Leasing
    + Settling
    + Flow
    + Events
    + Schedules
    + Admission
    + Buckets
    + Workers
    + Admin
    + Observe
{
}

impl<T> Store for T where
    T: Engine
        + Tasks
        + Leasing
        + Settling
        + Flow
        + Events
        + Schedules
        + Admission
        + Buckets
        + Workers
        + Admin
        + Observe
{
}

/// Opens the store a URL names: `sqlite://PATH` (created if missing), `postgres://...`
/// or `mysql://...` (MySQL or MariaDB).
pub async fn connect(url: &str, max_connections: u32) -> StoreResult<std::sync::Arc<dyn Store>> {
    if url.starts_with("mysql://") {
        Ok(std::sync::Arc::new(
            mysql::MysqlStore::connect(url, max_connections).await?,
        ))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(std::sync::Arc::new(
            postgres::PostgresStore::connect(url, max_connections).await?,
        ))
    } else {
        Ok(std::sync::Arc::new(
            sqlite::SqliteStore::connect(url).await?,
        ))
    }
}
