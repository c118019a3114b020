//! The database a relay reads: the SQL of one batch (lock, read, delete, mark
//! refused) and of the gauges, for Postgres and for MySQL/MariaDB. Both lock rows with
//! `FOR UPDATE SKIP LOCKED` in id order, so several relays share a table without
//! holding a row twice at once.

use sqlx::{MySql, MySqlPool, PgPool, Postgres, QueryBuilder, Transaction};

/// The producer's database that holds `taskbroker_outbox`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Source {
    Postgres(PgPool),
    MySql(MySqlPool),
}

impl From<PgPool> for Source {
    fn from(p: PgPool) -> Self {
        Source::Postgres(p)
    }
}

impl From<MySqlPool> for Source {
    fn from(p: MySqlPool) -> Self {
        Source::MySql(p)
    }
}

/// A locked row: (id, idempotency_key, spec, seconds since the insert).
pub(super) type Row = (i64, String, Vec<u8>, f64);

/// One batch's transaction.
pub(super) enum SourceTx {
    Postgres(Transaction<'static, Postgres>),
    MySql(Transaction<'static, MySql>),
}

impl Source {
    pub(super) async fn begin(&self) -> Result<SourceTx, sqlx::Error> {
        Ok(match self {
            Source::Postgres(p) => SourceTx::Postgres(p.begin().await?),
            // Under REPEATABLE READ (InnoDB's default) the locking scan would also lock
            // the gap after the last row and hold producers' inserts until the batch
            // commits; READ COMMITTED locks the rows only. SET TRANSACTION applies to
            // the transaction that follows it, and only to that one.
            Source::MySql(p) => SourceTx::MySql(
                p.begin_with("SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION")
                    .await?,
            ),
        })
    }

    /// Age in seconds of the oldest row waiting to be shipped, if any.
    pub(super) async fn oldest_pending(&self) -> Result<Option<f64>, sqlx::Error> {
        match self {
            Source::Postgres(p) => {
                sqlx::query_scalar(
                    "SELECT extract(epoch FROM clock_timestamp() - created_at)::float8 \
                     FROM taskbroker_outbox WHERE failed_at IS NULL ORDER BY id LIMIT 1",
                )
                .fetch_optional(p)
                .await
            }
            Source::MySql(p) => {
                sqlx::query_scalar(
                    "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, created_at, UTC_TIMESTAMP(6)) \
                            AS DOUBLE) / 1e6 \
                     FROM taskbroker_outbox WHERE failed_at IS NULL ORDER BY id LIMIT 1",
                )
                .fetch_optional(p)
                .await
            }
        }
    }

    /// Rows the broker refused for good.
    pub(super) async fn refused_rows(&self) -> Result<i64, sqlx::Error> {
        let q = "SELECT count(*) FROM taskbroker_outbox WHERE failed_at IS NOT NULL";
        match self {
            Source::Postgres(p) => sqlx::query_scalar(q).fetch_one(p).await,
            Source::MySql(p) => sqlx::query_scalar(q).fetch_one(p).await,
        }
    }
}

impl SourceTx {
    /// Locks up to `limit` waiting rows in id order, cut to `max_bytes` of specs (at
    /// least one row), and reads them.
    pub(super) async fn lock_rows(
        &mut self,
        limit: usize,
        max_bytes: usize,
    ) -> Result<Vec<Row>, sqlx::Error> {
        // Ids and sizes first, so a batch of large specs is cut by bytes before
        // they are read.
        let candidates: Vec<(i64, i64)> = match self {
            SourceTx::Postgres(tx) => {
                sqlx::query_as(
                    "SELECT id, octet_length(spec)::int8 FROM taskbroker_outbox \
                     WHERE failed_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
                )
                .bind(limit as i64)
                .fetch_all(&mut **tx)
                .await?
            }
            SourceTx::MySql(tx) => {
                sqlx::query_as(
                    "SELECT id, CAST(octet_length(spec) AS SIGNED) FROM taskbroker_outbox \
                     WHERE failed_at IS NULL ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED",
                )
                .bind(limit as i64)
                .fetch_all(&mut **tx)
                .await?
            }
        };
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let mut ids = Vec::with_capacity(candidates.len());
        let mut bytes = 0usize;
        for (id, len) in candidates {
            bytes += len.max(0) as usize;
            if !ids.is_empty() && bytes > max_bytes {
                break;
            }
            ids.push(id);
        }
        match self {
            SourceTx::Postgres(tx) => {
                sqlx::query_as(
                    "SELECT id, idempotency_key, spec, \
                            extract(epoch FROM clock_timestamp() - created_at)::float8 \
                     FROM taskbroker_outbox WHERE id = ANY($1) ORDER BY id",
                )
                .bind(&ids)
                .fetch_all(&mut **tx)
                .await
            }
            SourceTx::MySql(tx) => {
                let mut q = QueryBuilder::<MySql>::new(
                    "SELECT id, idempotency_key, spec, \
                            CAST(TIMESTAMPDIFF(MICROSECOND, created_at, UTC_TIMESTAMP(6)) \
                                 AS DOUBLE) / 1e6 \
                     FROM taskbroker_outbox WHERE id IN (",
                );
                let mut list = q.separated(", ");
                for id in &ids {
                    list.push_bind(*id);
                }
                q.push(") ORDER BY id");
                q.build_query_as().fetch_all(&mut **tx).await
            }
        }
    }

    /// Deletes the shipped rows.
    pub(super) async fn delete(&mut self, ids: &[i64]) -> Result<(), sqlx::Error> {
        match self {
            SourceTx::Postgres(tx) => {
                sqlx::query("DELETE FROM taskbroker_outbox WHERE id = ANY($1)")
                    .bind(ids)
                    .execute(&mut **tx)
                    .await?;
            }
            SourceTx::MySql(tx) => {
                let mut q =
                    QueryBuilder::<MySql>::new("DELETE FROM taskbroker_outbox WHERE id IN (");
                let mut list = q.separated(", ");
                for id in ids {
                    list.push_bind(*id);
                }
                q.push(")");
                q.build().execute(&mut **tx).await?;
            }
        }
        Ok(())
    }

    /// Marks a row refused for good: the relay skips it from then on.
    pub(super) async fn mark_refused(&mut self, id: i64, why: &str) -> Result<(), sqlx::Error> {
        tracing::warn!(
            row = id,
            error = why,
            "outbox relay: the broker refused a row; it is kept with failed_at set"
        );
        match self {
            SourceTx::Postgres(tx) => {
                sqlx::query(
                    "UPDATE taskbroker_outbox \
                     SET attempts = attempts + 1, last_error = $2, failed_at = now() WHERE id = $1",
                )
                .bind(id)
                .bind(why)
                .execute(&mut **tx)
                .await?;
            }
            SourceTx::MySql(tx) => {
                sqlx::query(
                    "UPDATE taskbroker_outbox \
                     SET attempts = attempts + 1, last_error = ?, failed_at = UTC_TIMESTAMP(6) \
                     WHERE id = ?",
                )
                .bind(why)
                .bind(id)
                .execute(&mut **tx)
                .await?;
            }
        }
        Ok(())
    }

    pub(super) async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            SourceTx::Postgres(tx) => tx.commit().await,
            SourceTx::MySql(tx) => tx.commit().await,
        }
    }

    pub(super) async fn rollback(self) -> Result<(), sqlx::Error> {
        match self {
            SourceTx::Postgres(tx) => tx.rollback().await,
            SourceTx::MySql(tx) => tx.rollback().await,
        }
    }
}

/// A transaction rolled back by the database for a lock conflict (a deadlock, SQLSTATE
/// 40001, or MySQL's lock wait timeout, 1205): nothing of it happened, and it can be
/// run again at once.
pub(super) fn conflict(e: &sqlx::Error) -> bool {
    let Some(db) = e.as_database_error() else {
        return false;
    };
    if db.code().as_deref() == Some("40001") {
        return true;
    }
    db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .is_some_and(|m| m.number() == 1205)
}
