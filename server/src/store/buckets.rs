//! Limit buckets and cooldowns (migration 0023): the stored buckets, the
//! queues whose tasks named one, and the live cooldowns, as operators and
//! failing workers change them. How the gated lease applies them is
//! `limits.rs`. Reads are written once here for every database; each
//! backend's `buckets.rs` writes.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::limits::parse_bucket;
use super::row::{from_ms, ms};
use super::{StoreError, StoreResult};
use crate::domain::bucket::{BucketConfig, CooldownTarget};

/// A bucket's stored settings and token bucket as last written.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredBucket {
    pub name: String,
    pub config: BucketConfig,
    pub tokens: f64,
    pub refilled_at_ms: i64,
    pub updated_at: DateTime<Utc>,
}

/// `Buckets::bucket_put`: defines a bucket or replaces its settings.
#[derive(Debug, Clone)]
pub struct BucketPut {
    pub name: String,
    pub config: BucketConfig,
    pub now: DateTime<Utc>,
}

/// `Buckets::cooldown_put`: holds a key or bucket until `until` (a later
/// cooldown of the same one wins; an earlier one changes nothing).
#[derive(Debug, Clone)]
pub struct CooldownPut {
    pub target: CooldownTarget,
    pub until: DateTime<Utc>,
    /// The task whose failed attempt set it.
    pub task_id: String,
    pub now: DateTime<Utc>,
}

/// One live cooldown.
#[derive(Debug, Clone, PartialEq)]
pub struct CooldownRecord {
    pub target: CooldownTarget,
    pub until: DateTime<Utc>,
    pub task_id: String,
}

/// Limit buckets and cooldowns.
#[async_trait]
pub trait Buckets: Send + Sync + 'static {
    /// Every defined bucket, by name.
    async fn bucket_list(&self) -> StoreResult<Vec<StoredBucket>>;
    /// Defines a bucket or replaces its settings (its tokens kept).
    async fn bucket_put(&self, p: &BucketPut) -> StoreResult<()>;
    /// Removes a bucket (and the record of the queues that named it); false
    /// when it was not defined.
    async fn bucket_delete(&self, name: &str) -> StoreResult<bool>;
    /// The leases its tasks hold now.
    async fn bucket_leased(&self, name: &str) -> StoreResult<u64>;
    /// Records that a task of `queue` named `bucket` itself (its leases then
    /// take the gated lease on every replica).
    async fn bucket_queue_note(&self, bucket: &str, queue: &str) -> StoreResult<()>;
    /// Every (bucket, queue) recorded by [`Buckets::bucket_queue_note`].
    async fn bucket_queues(&self) -> StoreResult<Vec<(String, String)>>;
    /// Sets a cooldown (see [`CooldownPut`]); drops the ended ones.
    async fn cooldown_put(&self, p: &CooldownPut) -> StoreResult<()>;
    /// The cooldowns live at `now`, soonest end first.
    async fn cooldown_list(&self, now: DateTime<Utc>) -> StoreResult<Vec<CooldownRecord>>;
    /// Ends a live cooldown now; false when there was none.
    async fn cooldown_lift(&self, target: &CooldownTarget, now: DateTime<Utc>)
    -> StoreResult<bool>;
}

/// `Buckets::bucket_list` from the backend's `BUCKET_LIST`.
pub(crate) async fn bucket_list_of<DB>(
    pool: &sqlx::Pool<DB>,
    stmt: &'static str,
) -> StoreResult<Vec<StoredBucket>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'r> (String, String, f64, i64, i64): sqlx::FromRow<'r, DB::Row>,
{
    let rows: Vec<(String, String, f64, i64, i64)> =
        sqlx::query_as::<DB, _>(stmt).fetch_all(pool).await?;
    rows.into_iter()
        .map(|(name, json, tokens, refilled_at_ms, updated_at)| {
            Ok(StoredBucket {
                config: parse_bucket(&name, &json)?,
                name,
                tokens,
                refilled_at_ms,
                updated_at: from_ms(updated_at),
            })
        })
        .collect()
}

/// `Buckets::bucket_leased` from the backend's `BUCKET_LEASED` (bound: the name).
pub(crate) async fn bucket_leased_of<DB>(
    pool: &sqlx::Pool<DB>,
    stmt: &'static str,
    name: &str,
) -> StoreResult<u64>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> (i64,): sqlx::FromRow<'r, DB::Row>,
{
    let (n,): (i64,) = sqlx::query_as::<DB, (i64,)>(stmt)
        .bind(name)
        .fetch_one(pool)
        .await?;
    Ok(n.max(0) as u64)
}

/// `Buckets::bucket_queues` from the backend's `BUCKET_QUEUES`.
pub(crate) async fn bucket_queues_of<DB>(
    pool: &sqlx::Pool<DB>,
    stmt: &'static str,
) -> StoreResult<Vec<(String, String)>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'r> (String, String): sqlx::FromRow<'r, DB::Row>,
{
    Ok(sqlx::query_as::<DB, (String, String)>(stmt)
        .fetch_all(pool)
        .await?)
}

/// `Buckets::cooldown_list` from the backend's `COOLDOWN_LIST` (bound: now, ms).
pub(crate) async fn cooldown_list_of<DB>(
    pool: &sqlx::Pool<DB>,
    stmt: &'static str,
    now: DateTime<Utc>,
) -> StoreResult<Vec<CooldownRecord>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> (String, String, String, i64, String): sqlx::FromRow<'r, DB::Row>,
{
    let rows: Vec<(String, String, String, i64, String)> = sqlx::query_as::<DB, _>(stmt)
        .bind(ms(now))
        .fetch_all(pool)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(queue, key, bucket, until, task_id)| CooldownRecord {
            target: CooldownTarget::from_columns(queue, key, bucket),
            until: from_ms(until),
            task_id,
        })
        .collect())
}

/// A bucket's settings as their JSON column stores them.
pub(crate) fn config_json(c: &BucketConfig) -> StoreResult<String> {
    serde_json::to_string(c).map_err(|e| StoreError::Internal(Box::new(e)))
}

/// A backend's write statements for [`Buckets`], where sqlx runs them
/// (Postgres, MySQL): the same binds in the same order on both.
pub(crate) struct WriteStatements {
    pub put: &'static str,
    pub delete: &'static str,
    pub delete_queues: &'static str,
    pub note: &'static str,
    pub cooldown_put: &'static str,
    pub cooldown_purge: &'static str,
    pub cooldown_lift: &'static str,
}

/// The writes of [`Buckets`] over a sqlx pool, each one statement or one
/// transaction.
pub(crate) struct PoolWrites<'a, DB: sqlx::Database> {
    pub pool: &'a sqlx::Pool<DB>,
    pub sql: &'a WriteStatements,
}

impl<DB> PoolWrites<'_, DB>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    DB::QueryResult: RowsAffected,
{
    pub async fn bucket_put(&self, p: &BucketPut) -> StoreResult<()> {
        sqlx::query::<DB>(self.sql.put)
            .bind(p.name.clone())
            .bind(config_json(&p.config)?)
            .bind(ms(p.now))
            .execute(self.pool)
            .await?;
        Ok(())
    }

    pub async fn bucket_delete(&self, name: &str) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query::<DB>(self.sql.delete)
            .bind(name.to_string())
            .execute(&mut *tx)
            .await?;
        sqlx::query::<DB>(self.sql.delete_queues)
            .bind(name.to_string())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(n.changed() > 0)
    }

    pub async fn bucket_queue_note(&self, bucket: &str, queue: &str) -> StoreResult<()> {
        sqlx::query::<DB>(self.sql.note)
            .bind(bucket.to_string())
            .bind(queue.to_string())
            .execute(self.pool)
            .await?;
        Ok(())
    }

    pub async fn cooldown_put(&self, p: &CooldownPut) -> StoreResult<()> {
        let (queue, key, bucket) = p.target.columns();
        let mut tx = self.pool.begin().await?;
        sqlx::query::<DB>(self.sql.cooldown_purge)
            .bind(ms(p.now))
            .execute(&mut *tx)
            .await?;
        sqlx::query::<DB>(self.sql.cooldown_put)
            .bind(queue.to_string())
            .bind(key.to_string())
            .bind(bucket.to_string())
            .bind(ms(p.until))
            .bind(p.task_id.clone())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn cooldown_lift(
        &self,
        target: &CooldownTarget,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let (queue, key, bucket) = target.columns();
        let n = sqlx::query::<DB>(self.sql.cooldown_lift)
            .bind(queue.to_string())
            .bind(key.to_string())
            .bind(bucket.to_string())
            .bind(ms(now))
            .execute(self.pool)
            .await?;
        Ok(n.changed() > 0)
    }
}

/// How many rows a statement changed, for the databases [`PoolWrites`] runs on.
pub(crate) trait RowsAffected {
    fn changed(&self) -> u64;
}

impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn changed(&self) -> u64 {
        self.rows_affected()
    }
}

impl RowsAffected for sqlx::mysql::MySqlQueryResult {
    fn changed(&self) -> u64 {
        self.rows_affected()
    }
}

/// `impl Buckets` for a store that reads and writes its buckets over one sqlx
/// pool (Postgres, MySQL; SQLite writes as writer jobs):
/// `pool_buckets!(Store, sqlx::Db)`, in a backend module whose `sql` holds
/// the statements.
macro_rules! pool_buckets {
    ($store:ty, $db:ty) => {
        const _: () = {
            use async_trait::async_trait;
            use chrono::{DateTime, Utc};

            use $crate::domain::bucket::CooldownTarget;
            use $crate::store::StoreResult;
            use $crate::store::buckets::{
                BucketPut, Buckets, CooldownPut, CooldownRecord, PoolWrites, StoredBucket,
                WriteStatements, bucket_leased_of, bucket_list_of, bucket_queues_of,
                cooldown_list_of,
            };

            const WRITES: WriteStatements = WriteStatements {
                put: sql::BUCKET_PUT,
                delete: sql::BUCKET_DELETE,
                delete_queues: sql::BUCKET_DELETE_QUEUES,
                note: sql::BUCKET_QUEUE_NOTE,
                cooldown_put: sql::COOLDOWN_PUT,
                cooldown_purge: sql::COOLDOWN_PURGE,
                cooldown_lift: sql::COOLDOWN_LIFT,
            };

            impl $store {
                fn writes(&self) -> PoolWrites<'_, $db> {
                    PoolWrites {
                        pool: &self.pool,
                        sql: &WRITES,
                    }
                }
            }

            #[async_trait]
            impl Buckets for $store {
                async fn bucket_list(&self) -> StoreResult<Vec<StoredBucket>> {
                    bucket_list_of(&self.pool, sql::BUCKET_LIST).await
                }

                async fn bucket_put(&self, p: &BucketPut) -> StoreResult<()> {
                    self.writes().bucket_put(p).await
                }

                async fn bucket_delete(&self, name: &str) -> StoreResult<bool> {
                    self.writes().bucket_delete(name).await
                }

                async fn bucket_leased(&self, name: &str) -> StoreResult<u64> {
                    bucket_leased_of(&self.pool, sql::BUCKET_LEASED, name).await
                }

                async fn bucket_queue_note(&self, bucket: &str, queue: &str) -> StoreResult<()> {
                    self.writes().bucket_queue_note(bucket, queue).await
                }

                async fn bucket_queues(&self) -> StoreResult<Vec<(String, String)>> {
                    bucket_queues_of(&self.pool, sql::BUCKET_QUEUES).await
                }

                async fn cooldown_put(&self, p: &CooldownPut) -> StoreResult<()> {
                    self.writes().cooldown_put(p).await
                }

                async fn cooldown_list(
                    &self,
                    now: DateTime<Utc>,
                ) -> StoreResult<Vec<CooldownRecord>> {
                    cooldown_list_of(&self.pool, sql::COOLDOWN_LIST, now).await
                }

                async fn cooldown_lift(
                    &self,
                    target: &CooldownTarget,
                    now: DateTime<Utc>,
                ) -> StoreResult<bool> {
                    self.writes().cooldown_lift(target, now).await
                }
            }
        };
    };
}
pub(crate) use pool_buckets;
