//! Planner statistics of the tasks table, kept close to the table.
//!
//! The hot statements (the plain lease, the task inserts) keep one generic plan
//! per connection, made at their first run and kept until the table's statistics
//! change (store/postgres/connect.rs). A plan made while the statistics say the
//! table is empty or tiny (a fresh database, a table that a purge and a vacuum
//! emptied) joins the leased rows in a nested loop over the whole table: seconds
//! per lease once it holds tens of thousands of rows. Autovacuum analyzes the table
//! after 10% of it changed, but only once a minute and only after its own delay.
//! So the broker checks every second whether the table holds several times the rows
//! its statistics say, and analyzes it then; the new statistics invalidate the
//! cached plans, which are made again on them at their next run. On a table whose
//! statistics are within that factor this costs one catalog read.

use super::super::*;

/// Live rows below which stale statistics cost little: no plan reads enough.
const STALE_MIN_ROWS: i64 = 1_000;
/// How many times the rows the statistics record the table must hold before
/// they are refreshed.
const STALE_FACTOR: i64 = 4;

impl PostgresStore {
    /// Analyzes `tasks` when it holds at least [`STALE_FACTOR`] times the rows
    /// its statistics record (and at least [`STALE_MIN_ROWS`]); true when it did.
    /// One replica at a time does it; the others see fresh statistics next time.
    pub(in crate::store::postgres) async fn statistics_refresh(&self) -> StoreResult<bool> {
        let stale: Option<bool> = sqlx::query_scalar(sql::STATISTICS_REFRESH_STALE)
            .bind(STALE_MIN_ROWS)
            .bind(STALE_FACTOR)
            .fetch_optional(&self.pool)
            .await?;
        if stale != Some(true) {
            return Ok(false);
        }
        let mut tx = self.pool.begin().await?;
        // Never wait behind a vacuum or a migration: the next tick tries again.
        sqlx::query(sql::STATISTICS_REFRESH_LOCK_TIMEOUT)
            .execute(&mut *tx)
            .await?;
        let ours: bool = sqlx::query_scalar(sql::STATISTICS_REFRESH_LOCK)
            .fetch_one(&mut *tx)
            .await?;
        if !ours {
            return Ok(false);
        }
        sqlx::query(sql::STATISTICS_REFRESH_ANALYZE)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }
}
