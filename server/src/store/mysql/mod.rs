//! The MySQL/MariaDB store (MySQL 8.0+, MariaDB 10.6+), for several broker
//! replicas sharing one database, as the Postgres store is.
//!
//! Every write runs as a job (`tx.rs`): one READ COMMITTED transaction (no gap
//! locks on the hot path) whose operations buffer the events of their
//! transitions; at its end the events are written, dependents of finished tasks
//! are resolved and dead-letter notices filed (in Rust: MySQL triggers cannot
//! change the table that fired them), then it commits. A job that loses a
//! deadlock is run again.
//!
//! Leasing reads its candidates with `SELECT ... FOR UPDATE SKIP LOCKED` (one
//! index-ordered read per queue) and leases them with UPDATEs by primary key in
//! the same transaction (MySQL has no UPDATE ... RETURNING), so replicas never
//! hand out the same task and never wait on each other's rows (`leasing.rs`,
//! `gated.rs`).
//!
//! Wake-ups across replicas (there is no LISTEN/NOTIFY): every event gets its id
//! from one counter row, `event_seq`, which each replica polls (`native/listen.rs`).
//!
//! Every statement is in the `.sql` file of the room that runs it; `sql` holds
//! them as constants.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::{Executor, MySqlPool};

use super::*;

/// This backend's statements, from the `.sql` files of this folder.
pub(crate) mod sql {
    include!(concat!(env!("OUT_DIR"), "/store_sql_mysql.rs"));
}

#[macro_use]
mod tx;

mod admin;
mod admission;
mod buckets;
mod engine;
mod events;
mod flow;
mod gated;
mod key_waits;
mod leasing;
mod native;
mod observe;
mod routing;
mod rows;
mod schedules;
mod settling;
mod sync_match;
mod tasks;
mod workers;

pub(crate) use tx::Job;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/mysql");

/// How long a store call waits for a pooled connection. While the database is
/// gone, sqlx keeps retrying a refused connection until then: this is how long
/// the first calls take to answer UNAVAILABLE.
pub(crate) const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a write waits for a connection once a write has found none (the
/// database is gone, or every connection stayed busy for [`ACQUIRE_TIMEOUT`]),
/// until a write gets one again. Writes queue behind each other (a Submit
/// waits for the combined insert in flight before its own): without this, each
/// of them would wait the full [`ACQUIRE_TIMEOUT`] during an outage. A database
/// that is back is reached well within it (sqlx retries a refused connection
/// after 10 ms, then 20, 40, ...).
pub(crate) const ACQUIRE_WHILE_DOWN: Duration = Duration::from_secs(1);

pub struct MysqlStore {
    pool: MySqlPool,
    /// The last write found no connection (see [`ACQUIRE_WHILE_DOWN`]).
    down: AtomicBool,
    /// Wakes this replica's long-polls for queues a job of its own made
    /// pending (the poller of `native/listen.rs` covers the other replicas).
    waker: Arc<OnceLock<Waker>>,
    notes: Arc<native::listen::Notes>,
    /// Bytes of parameters one statement may carry (`native/packet.rs`).
    packet: usize,
}

impl MysqlStore {
    /// Opens a pool on `mysql://user:pass@host:port/db`.
    pub async fn connect(url: &str, max_connections: u32) -> StoreResult<Self> {
        debug_assert!(rows::reply_size_is_shared(), "rows.sql: reply_size");
        let opts: MySqlConnectOptions = url.parse()?;
        let pool = MySqlPoolOptions::new()
            .max_connections(max_connections.max(2))
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    // Row locks only on rows read (no gap locks), as on Postgres; a
                    // statement never waits long for a lock another one holds.
                    conn.execute(sql::CONNECT_ISOLATION).await?;
                    conn.execute(sql::CONNECT_LOCK_WAIT).await?;
                    Ok(())
                })
            })
            .connect_with(opts)
            .await?;
        // Multi-row statements are cut to fit it (`native/packet.rs`).
        let max_allowed_packet: i64 = sqlx::query_scalar(sql::CONNECT_MAX_ALLOWED_PACKET)
            .fetch_one(&pool)
            .await?;
        Ok(MysqlStore {
            packet: native::packet::budget(u64::try_from(max_allowed_packet).unwrap_or(0)),
            pool,
            down: AtomicBool::new(false),
            waker: Arc::new(OnceLock::new()),
            notes: Arc::new(native::listen::Notes::default()),
        })
    }
}

/// Whether a failed job may simply run again: it lost a deadlock (1213) or a
/// lock wait (1205).
pub(crate) fn retryable(e: &StoreError) -> bool {
    let (StoreError::Internal(b) | StoreError::Unavailable(b)) = e else {
        return false;
    };
    let Some(sqlx::Error::Database(db)) = b.downcast_ref::<sqlx::Error>() else {
        return false;
    };
    db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .is_some_and(|m| matches!(m.number(), 1213 | 1205))
}

/// `n` placeholders, `?, ?, ...`: the list of a statement whose length varies
/// with the batch (a named `..._head` statement, then the list, then `)`).
pub(crate) fn marks(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// `n` copies of a named `..._row` statement (`(?, ?, ...)`), comma separated:
/// the rows of a multi-row INSERT.
pub(crate) fn rows_of(n: usize, row: &str) -> String {
    vec![row; n].join(", ")
}

/// A named `..._head` statement whose last placeholder a `QueryBuilder` binds
/// first (its `push_bind` writes the placeholder): the head without it.
pub(crate) fn bound_last(head: &str) -> &str {
    head.strip_suffix('?').unwrap_or(head)
}

// The end of every write job: flow's follow-ups and the events (`events`),
// then the commit, then the local wake-ups. `tx` begins and retries jobs.
impl MysqlStore {
    /// Ends a job: flow's follow-ups and the events, then the commit, then the
    /// local wake-ups.
    pub(crate) async fn finish(&self, mut job: Job) -> StoreResult<()> {
        let ids = events::after_job(&mut job).await?;
        job.tx.commit().await?;
        if let Some(ids) = ids.filter(|_| job.own_wakes) {
            // This replica's poller does not wake for them again.
            self.notes.own(ids);
        }
        if let Some(wake) = self.waker.get() {
            job.woken.sort_unstable();
            job.woken.dedup();
            for q in &job.woken {
                wake(Some(q));
            }
        }
        Ok(())
    }
}
