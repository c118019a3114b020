//! The Postgres store, for several broker replicas sharing one database.
//!
//! Leasing uses `FOR UPDATE SKIP LOCKED`, so replicas never hand out the same task
//! and never wait on each other's rows; settling and admin changes lock the one row
//! they change. Every change that makes a task pending sends `NOTIFY taskbroker`
//! with the queue name, so long-polls on every replica wake.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{PgPool, Postgres, Transaction};
use tokio_util::sync::CancellationToken;

use super::row::{AttemptEnd, FailureWrite, TaskRow, decide, duration_ms, from_ms, ms};
use super::*;

/// This backend's statements, from the `.sql` files of this folder.
pub(crate) mod sql {
    include!(concat!(env!("OUT_DIR"), "/store_sql_postgres.rs"));
}
use crate::domain::task::{Report, SettleCheck, settle_check};

// One file per capability, each implementing its trait in place.
mod admin;
mod admission;
mod buckets;
mod engine;
mod events;
mod flow;
mod leasing;
mod observe;
mod schedules;
mod settling;
mod tasks;
mod workers;
// Their helpers: the gated lease, dependencies by key at submit, routing, the
// task row, sync match, the write transaction.
mod gated;
mod key_waits;
mod routing;
mod rows;
mod sync_match;
mod tx;
// What only Postgres needs: connect, hosts, the router, listen, statistics, horizon.
pub mod native;
use native::hosts;
use native::hosts::DbUrl;
use native::router::{self, Router};

use super::flow::{failure_events as flow_failure_events, of_row as flow_of_row};
use crate::domain::event::EventKind;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

/// The NOTIFY channel that carries queue names of newly pending tasks.
pub const CHANNEL: &str = "taskbroker";

pub struct PostgresStore {
    /// With several hosts (or `target_session_attrs`): the host in use now,
    /// which the pools follow (see [`hosts`]).
    router: Option<Arc<Router>>,
    pool: PgPool,
    /// The plain lease, the task insert and the sync-matched insert run
    /// here, on connections with generic plans (see [`PostgresStore::connect`]);
    /// None with a single connection (then they run on `pool`).
    hot: Option<PgPool>,
    /// For the notification listener's own connection, outside the pool: a
    /// listener holds its connection for good, and must not starve the calls.
    options: PgConnectOptions,
    /// `@` and a random id of this store (this replica), appended to
    /// the queue name of the wake-ups it sends, so its listener knows them.
    wake_tag: String,
    notes: Arc<Notes>,
}

/// How long a broker transaction may sit idle between statements before the
/// server ends it (see [`PostgresStore::connect`]).
const WRITER_IDLE_LIMIT: &str = "30s";

/// What the listener received (see [`NotificationStats`]).
#[derive(Default)]
struct Notes {
    received: std::sync::atomic::AtomicU64,
    own_skipped: std::sync::atomic::AtomicU64,
}
