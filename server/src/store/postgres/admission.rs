//! Admission on Postgres: stored queue settings and the gated lease.
//!
//! How limits hold for the whole cluster: a gated lease first locks the `queues`
//! rows of its gated queues (`SELECT ... FOR UPDATE`, in name order so two leases
//! never wait on each other in a cycle). While it holds a queue's row, no other
//! gated lease of that queue, on any replica, can count or grant. Under READ
//! COMMITTED every later statement of the transaction sees all leases committed
//! before the lock was granted, so the leases it counts (through
//! `tasks_leased_key`) are at least those held: settling and reclaiming only
//! lower the count, and granting happens only under the lock. The token buckets
//! live on the same locked rows (and in `queue_key_tokens`, written only under
//! the queue's lock). The rows granted are updated with `state = 'pending'`
//! re-checked, so a task taken meanwhile by a plain lease (a replica that has
//! not yet seen the queue's new gates) is skipped, never leased twice.
//!
//! Cost: gated leases of one queue take turns (one transaction at a time per
//! queue; each replica already combines its concurrent leases into one), and
//! queues without gates never touch these rows.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::super::admission::{queue_list_of, queue_pending_of};
use super::super::row::ms;
use super::super::*;
use super::{PostgresStore, sql};
use crate::domain::admission::{Fairness, QueueConfig};

pub(super) use super::super::admission::parse_config as parse;

fn to_json(c: &QueueConfig) -> StoreResult<String> {
    serde_json::to_string(c).map_err(|e| StoreError::Internal(Box::new(e)))
}

#[async_trait]
impl Admission for PostgresStore {
    async fn queue_pending(&self, queue: &str) -> StoreResult<(u64, u64)> {
        queue_pending_of(&self.pool, sql::QUEUE_PENDING, queue).await
    }

    async fn queue_dead_letters_set(&self, pairs: &[(String, String)]) -> StoreResult<()> {
        let queues: Vec<&str> = pairs.iter().map(|p| p.0.as_str()).collect();
        let dlqs: Vec<&str> = pairs.iter().map(|p| p.1.as_str()).collect();
        let mut tx = self.pool.begin().await?;
        sqlx::query(sql::QUEUE_DEAD_LETTERS_SET_CLEAR)
            .execute(&mut *tx)
            .await?;
        sqlx::query(sql::QUEUE_DEAD_LETTERS_SET_INSERT)
            .bind(&queues)
            .bind(&dlqs)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn queue_list(&self) -> StoreResult<Vec<StoredQueue>> {
        queue_list_of(&self.pool, sql::QUEUE_LIST).await
    }

    async fn queue_seed(
        &self,
        seed: &[(String, crate::domain::admission::QueueConfig)],
    ) -> StoreResult<()> {
        let names: Vec<&str> = seed.iter().map(|(n, _)| n.as_str()).collect();
        let configs = seed
            .iter()
            .map(|(_, c)| to_json(c))
            .collect::<StoreResult<Vec<String>>>()?;
        let mut tx = self.pool.begin().await?;
        sqlx::query(sql::QUEUE_SEED_DELETE)
            .bind(&names)
            .execute(&mut *tx)
            .await?;
        sqlx::query(sql::QUEUE_SEED_UPSERT)
            .bind(&names)
            .bind(&configs)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn queue_put(
        &self,
        name: &str,
        config: &crate::domain::admission::QueueConfig,
        version: Option<i64>,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let json = to_json(config)?;
        let mut tx = self.pool.begin().await?;
        let n = match version {
            None => sqlx::query(sql::QUEUE_PUT_INSERT)
                .bind(name)
                .bind(&json)
                .bind(ms(now))
                .execute(&mut *tx)
                .await?
                .rows_affected(),
            Some(v) => sqlx::query(sql::QUEUE_PUT_UPDATE)
                .bind(name)
                .bind(&json)
                .bind(ms(now))
                .bind(v)
                .execute(&mut *tx)
                .await?
                .rows_affected(),
        };
        // A resumed (or widened) queue: long-polls on every replica look again.
        Self::notify(&mut tx, &[name]).await?;
        tx.commit().await?;
        Ok(n == 1)
    }

    async fn queue_usage(
        &self,
        queue: &str,
        key: Option<&str>,
        now: DateTime<Utc>,
    ) -> StoreResult<QueueUsage> {
        let statements = [
            sql::QUEUE_USAGE_QUEUE,
            sql::QUEUE_USAGE_LEASED,
            sql::QUEUE_USAGE_KEY_HOLDERS,
            sql::QUEUE_USAGE_KEY_TOKENS,
        ];
        super::super::admission::queue_usage_of(&self.pool, queue, key, now, statements).await
    }

    async fn task_ahead(
        &self,
        t: &TaskRecord,
        aging_ms: Option<i64>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let now = ms(now);
        let config: Option<String> = sqlx::query_scalar(sql::TASK_AHEAD_CONFIG)
            .bind(&t.queue)
            .fetch_optional(&self.pool)
            .await?;
        let fair = match config {
            Some(json) => parse(&t.queue, &json)?.fairness == Fairness::RoundRobinKeys,
            None => false,
        };
        // The READY tasks ranked as the gated lease ranks them (see `candidates`),
        // counted up to the task's own place.
        let n: i64 = sqlx::query_scalar(sql::TASK_AHEAD)
            .bind(&t.queue)
            .bind(now)
            .bind(aging_ms.unwrap_or(0))
            .bind(t.seq)
            .bind(fair)
            .fetch_one(&self.pool)
            .await?;
        Ok(n.max(0) as u64)
    }

    /// Deletes the per-key buckets full again at `now` (one DELETE per queue with
    /// a per-key rate limit) and those of queues without one. A gated lease that
    /// read a bucket before it went writes it back whole (an absent bucket is a
    /// full one, which is what it read); one that commits first leaves a bucket
    /// this DELETE, re-checking the row it would delete, no longer finds full.
    async fn queue_key_tokens_purge(&self, now: DateTime<Utc>) -> StoreResult<u64> {
        let now = ms(now);
        let mut limited: Vec<String> = Vec::new();
        let mut fair: Vec<String> = Vec::new();
        let mut n = 0;
        for q in self.queue_list().await? {
            if q.config.fairness == Fairness::RoundRobinKeys {
                fair.push(q.name.clone());
            }
            let Some(l) = q.config.per_key_rate_limit else {
                continue;
            };
            n += sqlx::query(sql::QUEUE_KEY_TOKENS_PURGE_FULL)
                .bind(&q.name)
                .bind(now)
                .bind(l.per_second)
                .bind(l.capacity())
                .execute(&self.pool)
                .await?
                .rows_affected();
            limited.push(q.name);
        }
        n += sqlx::query(sql::QUEUE_KEY_TOKENS_PURGE_UNLIMITED)
            .bind(&limited)
            .execute(&self.pool)
            .await?
            .rows_affected();
        // Round robin's turns: those of queues without it, and those served so
        // long ago that an absent row ranks them the same.
        sqlx::query(sql::QUEUE_KEY_TOKENS_PURGE_TURNS)
            .bind(&fair)
            .bind(crate::domain::admission::TURNS_KEPT)
            .execute(&self.pool)
            .await?;
        Ok(n)
    }
}
