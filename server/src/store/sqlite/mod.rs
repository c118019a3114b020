//! The embedded SQLite store (the default).
//!
//! WAL mode with `synchronous = FULL`: a write is acknowledged only after its
//! transaction is on disk, so it survives `kill -9` and power loss. All writes go
//! through one connection and are group-committed (`native::writer`, handed to
//! by `tx`); reads use a pool of their own, which WAL lets run beside the writer.
//!
//! One file per capability (`tasks`, `leasing`, `settling`, ...), each
//! implementing its trait, with its statements in the `.sql` file of the same
//! name.

use std::str::FromStr;
use std::time::Duration;

use rusqlite::Connection;
use rusqlite::config::DbConfig;
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::*;

/// This backend's statements, from the `.sql` files of this folder.
pub(crate) mod sql {
    include!(concat!(env!("OUT_DIR"), "/store_sql_sqlite.rs"));
}

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
mod tx;
mod workers;

/// The plain lease's per-queue candidate statement (?1 worker, ?2 queue, ?3 the
/// worker's labels as JSON, ?4 now, ?5 how many at most), for the store tests
/// that count the rows it reads.
#[doc(hidden)]
pub fn lease_candidates_sql() -> &'static str {
    sql::LEASE_PLAIN_PICK
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

pub struct SqliteStore {
    writer: native::writer::Writer,
    write_pool: SqlitePool,
    reader: SqlitePool,
}

impl SqliteStore {
    /// Opens (and creates) the database file named by `sqlite://PATH`.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let opts = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(5));
        let write_pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts.clone())
            .await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(opts.clone().read_only(true))
            .await?;
        let conn = open_writer(opts.get_filename())?;
        let checkpoint = open_connection(opts.get_filename())?;
        let writer = native::writer::Writer::start(conn, checkpoint, flow::after_commit)
            .map_err(|e| StoreError::Internal(format!("cannot start the writer: {e}").into()))?;
        Ok(SqliteStore {
            writer,
            write_pool,
            reader,
        })
    }
}

/// A connection with the same durability settings as the pools.
fn open_connection(path: &std::path::Path) -> StoreResult<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    Ok(conn)
}

/// The writer's connection. Checkpoints are the checkpointer thread's job; the
/// writer checkpoints itself only if the WAL grows past ~64 MiB regardless.
fn open_writer(path: &std::path::Path) -> StoreResult<rusqlite::Connection> {
    let conn = open_connection(path)?;
    conn.pragma_update(None, "wal_autocheckpoint", 16384)?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.pragma_update(None, "cache_size", -32768)?;
    // Plans must not depend on bound values: otherwise SQLite (built with STAT4)
    // marks the lease statement to be re-prepared whenever `now` changes, and
    // compiling it again cost more than running it (half the writer's time in
    // per-task runs).
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    // The lease statement differs by the number of queues asked for; keep many.
    conn.set_prepared_statement_cache_capacity(128);
    Ok(conn)
}

// The end of every write job: its events and flow's follow-ups, in the job's
// savepoint (`tx` holds the buffer; `flow` what follows from the events).
impl SqliteStore {
    /// Runs `job` in the writer's next batch and returns its result once the
    /// batch committed. The job's events are written, and dependents of tasks
    /// it finished told, in its savepoint; a failed job's events go with it (and
    /// none left by a job that panicked can reach this one).
    pub(super) async fn write<T, F>(&self, job: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        self.writer
            .write(move |c| {
                tx::discard();
                let result = job(c).and_then(|v| flow::after_job(c).map(|()| v));
                if result.is_err() {
                    tx::discard();
                }
                result
            })
            .await
    }
}
