//! Limit buckets and cooldowns on SQLite: the shared reads of
//! `store/buckets.rs` over the reader pool, the writes as writer jobs, with
//! the statements of `buckets.sql`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::params;

use super::super::StoreResult;
use super::super::buckets::*;
use super::super::row::ms;
use super::{SqliteStore, sql};
use crate::domain::bucket::CooldownTarget;

#[async_trait]
impl Buckets for SqliteStore {
    async fn bucket_list(&self) -> StoreResult<Vec<StoredBucket>> {
        bucket_list_of(&self.reader, sql::BUCKET_LIST).await
    }

    async fn bucket_put(&self, p: &BucketPut) -> StoreResult<()> {
        let (name, json, now) = (p.name.clone(), config_json(&p.config)?, ms(p.now));
        self.write(move |c| {
            c.prepare_cached(sql::BUCKET_PUT)?
                .execute(params![name, json, now])?;
            Ok(())
        })
        .await
    }

    async fn bucket_delete(&self, name: &str) -> StoreResult<bool> {
        let name = name.to_owned();
        self.write(move |c| {
            let n = c
                .prepare_cached(sql::BUCKET_DELETE)?
                .execute(params![name])?;
            c.prepare_cached(sql::BUCKET_DELETE_QUEUES)?
                .execute(params![name])?;
            Ok(n > 0)
        })
        .await
    }

    async fn bucket_leased(&self, name: &str) -> StoreResult<u64> {
        bucket_leased_of(&self.reader, sql::BUCKET_LEASED, name).await
    }

    async fn bucket_queue_note(&self, bucket: &str, queue: &str) -> StoreResult<()> {
        let (bucket, queue) = (bucket.to_owned(), queue.to_owned());
        self.write(move |c| {
            c.prepare_cached(sql::BUCKET_QUEUE_NOTE)?
                .execute(params![bucket, queue])?;
            Ok(())
        })
        .await
    }

    async fn bucket_queues(&self) -> StoreResult<Vec<(String, String)>> {
        bucket_queues_of(&self.reader, sql::BUCKET_QUEUES).await
    }

    async fn cooldown_put(&self, p: &CooldownPut) -> StoreResult<()> {
        let (queue, key, bucket) = p.target.columns();
        let (queue, key, bucket) = (queue.to_owned(), key.to_owned(), bucket.to_owned());
        let (until, now, task_id) = (ms(p.until), ms(p.now), p.task_id.clone());
        self.write(move |c| {
            c.prepare_cached(sql::COOLDOWN_PURGE)?
                .execute(params![now])?;
            c.prepare_cached(sql::COOLDOWN_PUT)?
                .execute(params![queue, key, bucket, until, task_id])?;
            Ok(())
        })
        .await
    }

    async fn cooldown_list(&self, now: DateTime<Utc>) -> StoreResult<Vec<CooldownRecord>> {
        cooldown_list_of(&self.reader, sql::COOLDOWN_LIST, now).await
    }

    async fn cooldown_lift(
        &self,
        target: &CooldownTarget,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let (queue, key, bucket) = target.columns();
        let (queue, key, bucket) = (queue.to_owned(), key.to_owned(), bucket.to_owned());
        let now = ms(now);
        self.write(move |c| {
            let n = c
                .prepare_cached(sql::COOLDOWN_LIFT)?
                .execute(params![queue, key, bucket, now])?;
            Ok(n > 0)
        })
        .await
    }
}
