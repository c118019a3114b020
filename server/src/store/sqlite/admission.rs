//! Admission on SQLite: stored queue settings, their state (buckets, turns),
//! what is pending, and the dead-letter queues. The gated lease that applies
//! them is `gated`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{Connection, params};

use super::super::admission::{queue_list_of, queue_pending_of};
use super::super::row::ms;
use super::super::*;
use super::{SqliteStore, sql};
use crate::domain::admission::{Fairness, QueueConfig};

pub(super) use super::super::admission::parse_config as parse;

fn to_json(c: &QueueConfig) -> StoreResult<String> {
    serde_json::to_string(c).map_err(|e| StoreError::Internal(Box::new(e)))
}

pub(super) fn json_text<T: serde::Serialize + ?Sized>(v: &T) -> StoreResult<String> {
    serde_json::to_string(v).map_err(|e| StoreError::Internal(Box::new(e)))
}

#[async_trait]
impl Admission for SqliteStore {
    async fn queue_pending(&self, queue: &str) -> StoreResult<(u64, u64)> {
        queue_pending_of(&self.reader, sql::QUEUE_PENDING, queue).await
    }

    async fn queue_dead_letters_set(&self, pairs: &[(String, String)]) -> StoreResult<()> {
        let pairs = pairs.to_owned();
        self.write(move |c| {
            c.prepare_cached(sql::QUEUE_DEAD_LETTERS_SET_CLEAR)?
                .execute([])?;
            for (q, dlq) in &pairs {
                c.prepare_cached(sql::QUEUE_DEAD_LETTERS_SET_INSERT)?
                    .execute(params![q, dlq])?;
            }
            Ok(())
        })
        .await
    }

    async fn queue_list(&self) -> StoreResult<Vec<StoredQueue>> {
        queue_list_of(&self.reader, sql::QUEUE_LIST).await
    }

    async fn queue_seed(&self, seed: &[(String, QueueConfig)]) -> StoreResult<()> {
        let seed = seed.to_owned();
        self.write(move |c| {
            let names: Vec<&str> = seed.iter().map(|(n, _)| n.as_str()).collect();
            let names =
                serde_json::to_string(&names).map_err(|e| StoreError::Internal(Box::new(e)))?;
            c.prepare_cached(sql::QUEUE_SEED_DELETE)?
                .execute(params![names])?;
            let mut put = c.prepare_cached(sql::QUEUE_SEED_UPSERT)?;
            for (name, config) in &seed {
                put.execute(params![name, to_json(config)?])?;
            }
            Ok(())
        })
        .await
    }

    async fn queue_put(
        &self,
        name: &str,
        config: &QueueConfig,
        version: Option<i64>,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let name = name.to_owned();
        let json = to_json(config)?;
        self.write(move |c| {
            let n = match version {
                None => c.prepare_cached(sql::QUEUE_PUT_INSERT)?.execute(params![
                    name,
                    json,
                    ms(now)
                ])?,
                Some(v) => c.prepare_cached(sql::QUEUE_PUT_UPDATE)?.execute(params![
                    name,
                    json,
                    ms(now),
                    v
                ])?,
            };
            Ok(n == 1)
        })
        .await
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
        super::super::admission::queue_usage_of(&self.reader, queue, key, now, statements).await
    }

    async fn task_ahead(
        &self,
        t: &TaskRecord,
        aging_ms: Option<i64>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let r = &self.reader;
        let aging = aging_ms.unwrap_or(0);
        let now = ms(now);
        let config: Option<String> = sqlx::query_scalar(sql::TASK_AHEAD_CONFIG)
            .bind(&t.queue)
            .fetch_optional(r)
            .await?;
        let fair = match config {
            Some(json) => parse(&t.queue, &json)?.fairness == Fairness::RoundRobinKeys,
            None => false,
        };
        let n: i64 = sqlx::query_scalar(sql::TASK_AHEAD)
            .bind(&t.queue)
            .bind(now)
            .bind(aging)
            .bind(t.seq)
            .bind(fair)
            .fetch_one(r)
            .await?;
        Ok(n.max(0) as u64)
    }

    async fn queue_key_tokens_purge(&self, now: DateTime<Utc>) -> StoreResult<u64> {
        self.write(move |c| key_tokens_purge(c, now)).await
    }
}

/// Deletes the per-key buckets full again at `now` and those of queues without
/// a per-key rate limit; in the writer's batch, so no lease runs meanwhile.
fn key_tokens_purge(c: &Connection, now: DateTime<Utc>) -> StoreResult<u64> {
    let now = ms(now);
    let mut st = c.prepare_cached(sql::QUEUE_KEY_TOKENS_PURGE_QUEUES)?;
    let queues = st
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
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
        n += c
            .prepare_cached(sql::QUEUE_KEY_TOKENS_PURGE_FULL)?
            .execute(params![name, now, l.per_second, l.capacity()])?;
        limited.push(name);
    }
    n += c
        .prepare_cached(sql::QUEUE_KEY_TOKENS_PURGE_UNLIMITED)?
        .execute(params![json_text(&limited)?])?;
    c.prepare_cached(sql::QUEUE_KEY_TOKENS_PURGE_TURNS)?
        .execute(params![
            json_text(&fair)?,
            crate::domain::admission::TURNS_KEPT
        ])?;
    Ok(n as u64)
}
