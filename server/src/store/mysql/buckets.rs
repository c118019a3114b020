//! Limit buckets and cooldowns on MySQL: the shared reads and writes of
//! `store/buckets.rs` over this pool and the statements of `buckets.sql`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::super::StoreResult;
use super::super::buckets::*;
use super::{MysqlStore, sql};
use crate::domain::bucket::CooldownTarget;

const WRITES: WriteStatements = WriteStatements {
    put: sql::BUCKET_PUT,
    delete: sql::BUCKET_DELETE,
    delete_queues: sql::BUCKET_DELETE_QUEUES,
    note: sql::BUCKET_QUEUE_NOTE,
    cooldown_put: sql::COOLDOWN_PUT,
    cooldown_purge: sql::COOLDOWN_PURGE,
    cooldown_lift: sql::COOLDOWN_LIFT,
};

impl MysqlStore {
    fn writes(&self) -> PoolWrites<'_, sqlx::MySql> {
        PoolWrites {
            pool: &self.pool,
            sql: &WRITES,
        }
    }
}

#[async_trait]
impl Buckets for MysqlStore {
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

    async fn cooldown_list(&self, now: DateTime<Utc>) -> StoreResult<Vec<CooldownRecord>> {
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
