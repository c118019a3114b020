//! Admission on MySQL: stored queue settings, shared by every replica, and
//! what the gates read. (The gated lease is in `gated.rs`.)

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::MySql;

use super::super::admission::{queue_list_of, queue_pending_of};
use super::super::row::ms;
use super::super::*;
use super::{Job, MysqlStore, sql};
use crate::domain::admission::{Fairness, QueueConfig};

#[async_trait]
impl Admission for MysqlStore {
    /// Backpressure: the waiting tasks (pending or blocked) of `queue` and the
    /// sum of their payload bytes (`tasks_lease` leads with `state, queue`).
    async fn queue_pending(&self, queue: &str) -> StoreResult<(u64, u64)> {
        queue_pending_of(&self.pool, sql::QUEUE_PENDING, queue).await
    }

    async fn queue_dead_letters_set(&self, pairs: &[(String, String)]) -> StoreResult<()> {
        job!(self, |j| {
            sqlx::query(sql::QUEUE_DEAD_LETTERS_SET_CLEAR)
                .execute(j.conn())
                .await?;
            for (q, dlq) in pairs {
                sqlx::query(sql::QUEUE_DEAD_LETTERS_SET_INSERT)
                    .bind(q)
                    .bind(dlq)
                    .execute(j.conn())
                    .await?;
            }
            Ok(())
        })
    }

    async fn queue_list(&self) -> StoreResult<Vec<StoredQueue>> {
        queue_list_of(&self.pool, sql::QUEUE_LIST).await
    }

    async fn queue_seed(&self, seed: &[(String, QueueConfig)]) -> StoreResult<()> {
        job!(self, |j| queue_seed(j, seed).await)
    }

    async fn queue_put(
        &self,
        name: &str,
        config: &QueueConfig,
        version: Option<i64>,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        job!(self, |j| {
            let json = to_json(config)?;
            let n = match version {
                None => sqlx::query(sql::QUEUE_PUT_INSERT)
                    .bind(name)
                    .bind(json)
                    .bind(ms(now))
                    .execute(j.conn())
                    .await?
                    .rows_affected(),
                Some(v) => sqlx::query(sql::QUEUE_PUT_UPDATE)
                    .bind(json)
                    .bind(ms(now))
                    .bind(name)
                    .bind(v)
                    .execute(j.conn())
                    .await?
                    .rows_affected(),
            };
            let done = n == 1;
            if done {
                // Every replica's long-polls of the queue look again.
                j.woken.push(name.to_string());
                j.spare = true;
            }
            Ok(done)
        })
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

    /// The READY tasks ranked as the gated lease ranks them, counted up to the
    /// task's own place.
    async fn task_ahead(
        &self,
        t: &TaskRecord,
        aging_ms: Option<i64>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let aging = aging_ms.unwrap_or(0);
        let now = ms(now);
        let config: Option<String> = sqlx::query_scalar(sql::TASK_AHEAD_CONFIG)
            .bind(&t.queue)
            .fetch_optional(&self.pool)
            .await?;
        let fair = match config {
            Some(json) => parse(&t.queue, &json)?.fairness == Fairness::RoundRobinKeys,
            None => false,
        };
        let text = match (fair, aging > 0) {
            (false, false) => sql::TASK_AHEAD,
            (true, false) => sql::TASK_AHEAD_FAIR,
            (false, true) => sql::TASK_AHEAD_AGED,
            (true, true) => sql::TASK_AHEAD_FAIR_AGED,
        };
        let mut q = sqlx::query_scalar::<_, i64>(text);
        if aging > 0 {
            q = q.bind(now).bind(aging);
        }
        let n: i64 = q
            .bind(&t.queue)
            .bind(now)
            .bind(now)
            .bind(t.seq)
            .fetch_one(&self.pool)
            .await?;
        Ok(n.max(0) as u64)
    }

    /// Deletes the per-key buckets full again at `now` and those of queues
    /// without a per-key rate limit, and round robin's turns no longer needed.
    async fn queue_key_tokens_purge(&self, now: DateTime<Utc>) -> StoreResult<u64> {
        job!(self, |j| key_tokens_purge(j, now).await)
    }
}

pub(super) use super::super::admission::parse_config as parse;

fn to_json(c: &QueueConfig) -> StoreResult<String> {
    serde_json::to_string(c).map_err(|e| StoreError::Internal(Box::new(e)))
}

async fn queue_seed(j: &mut Job, seed: &[(String, QueueConfig)]) -> StoreResult<()> {
    // Dynamic: the names seeded, as a list.
    let mut qb = sqlx::QueryBuilder::<MySql>::new(sql::QUEUE_SEED_DELETE);
    if !seed.is_empty() {
        qb.push(" AND name NOT IN (");
        let mut sep = qb.separated(", ");
        for (n, _) in seed {
            sep.push_bind(n);
        }
        qb.push(")");
    }
    qb.build().execute(j.conn()).await?;
    for (name, config) in seed {
        let json = to_json(config)?;
        let stored: Option<(String, Option<i64>)> = sqlx::query_as(sql::QUEUE_SEED_LOCK)
            .bind(name)
            .fetch_optional(j.conn())
            .await?;
        match stored {
            None => {
                sqlx::query(sql::QUEUE_SEED_INSERT)
                    .bind(name)
                    .bind(&json)
                    .execute(j.conn())
                    .await?;
            }
            Some((old, None)) if old != json => {
                sqlx::query(sql::QUEUE_SEED_UPDATE)
                    .bind(&json)
                    .bind(name)
                    .execute(j.conn())
                    .await?;
            }
            Some(_) => {}
        }
    }
    Ok(())
}

async fn key_tokens_purge(j: &mut Job, now: DateTime<Utc>) -> StoreResult<u64> {
    let now = ms(now);
    let queues: Vec<(String, String)> = sqlx::query_as(sql::QUEUE_KEY_TOKENS_PURGE_QUEUES)
        .fetch_all(j.conn())
        .await?;
    let mut limited: Vec<String> = Vec::new();
    let mut fair: Vec<String> = Vec::new();
    let mut n = 0;
    for (name, json) in queues {
        let config = parse(&name, &json)?;
        if config.fairness == Fairness::RoundRobinKeys {
            fair.push(name.clone());
        }
        let Some(l) = config.per_key_rate_limit else {
            continue;
        };
        n += sqlx::query(sql::QUEUE_KEY_TOKENS_PURGE_FULL)
            .bind(&name)
            .bind(now)
            .bind(l.per_second)
            .bind(l.capacity())
            .execute(j.conn())
            .await?
            .rows_affected();
        limited.push(name);
    }
    // Dynamic: the queues kept, as a list (none: every row).
    let mut qb = sqlx::QueryBuilder::<MySql>::new(sql::QUEUE_KEY_TOKENS_PURGE_UNLIMITED);
    not_in(&mut qb, " WHERE queue NOT IN (", &limited);
    n += qb.build().execute(j.conn()).await?.rows_affected();
    // Dynamic: the queues kept, as a list (none: every row).
    let mut qb = sqlx::QueryBuilder::<MySql>::new(sql::QUEUE_KEY_TOKENS_PURGE_UNFAIR);
    not_in(&mut qb, " WHERE queue NOT IN (", &fair);
    qb.build().execute(j.conn()).await?;
    for q in &fair {
        sqlx::query(sql::QUEUE_KEY_TOKENS_PURGE_TURNS)
            .bind(q)
            .bind(q)
            .bind(crate::domain::admission::TURNS_KEPT)
            .execute(j.conn())
            .await?;
    }
    Ok(n)
}

/// `prefix` and the list, closed; with an empty list, no condition at all
/// (every row: NOT IN () of nothing).
fn not_in(qb: &mut sqlx::QueryBuilder<MySql>, prefix: &str, names: &[String]) {
    if names.is_empty() {
        return;
    }
    qb.push(prefix);
    let mut sep = qb.separated(", ");
    for n in names {
        sep.push_bind(n.clone());
    }
    qb.push(")");
}
