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

use chrono::{DateTime, Utc};

use super::super::row::{from_ms, ms};
use super::super::*;
use super::PostgresStore;
use crate::domain::admission::{Fairness, QueueConfig};

pub(super) fn parse(name: &str, json: &str) -> StoreResult<QueueConfig> {
    serde_json::from_str(json)
        .map_err(|e| StoreError::Corrupt(format!("queue {name} settings: {e}")))
}

fn to_json(c: &QueueConfig) -> StoreResult<String> {
    serde_json::to_string(c).map_err(|e| StoreError::Internal(Box::new(e)))
}

impl PostgresStore {
    pub(super) async fn admission_queue_list(&self) -> StoreResult<Vec<StoredQueue>> {
        let rows: Vec<(String, String, Option<i64>, i64)> =
            sqlx::query_as("SELECT name, config, updated_at, version FROM queues ORDER BY name")
                .fetch_all(&self.pool)
                .await?;
        rows.into_iter()
            .map(|(name, config, updated_at, version)| {
                Ok(StoredQueue {
                    config: parse(&name, &config)?,
                    name,
                    updated_at: updated_at.map(from_ms),
                    version,
                })
            })
            .collect()
    }

    pub(super) async fn admission_queue_seed(
        &self,
        seed: &[(String, QueueConfig)],
    ) -> StoreResult<()> {
        let names: Vec<&str> = seed.iter().map(|(n, _)| n.as_str()).collect();
        let configs = seed
            .iter()
            .map(|(_, c)| to_json(c))
            .collect::<StoreResult<Vec<String>>>()?;
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM queues WHERE updated_at IS NULL AND name <> ALL($1::text[])")
            .bind(&names)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO queues (name, config) SELECT * FROM UNNEST($1::text[], $2::text[]) \
             ON CONFLICT (name) DO UPDATE SET config = EXCLUDED.config, \
               version = queues.version + 1 \
             WHERE queues.updated_at IS NULL AND queues.config <> EXCLUDED.config",
        )
        .bind(&names)
        .bind(&configs)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn admission_queue_put(
        &self,
        name: &str,
        config: &QueueConfig,
        version: Option<i64>,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let json = to_json(config)?;
        let mut tx = self.pool.begin().await?;
        let n = match version {
            None => sqlx::query(
                "INSERT INTO queues (name, config, updated_at, version) VALUES ($1, $2, $3, 1) \
                 ON CONFLICT (name) DO NOTHING",
            )
            .bind(name)
            .bind(&json)
            .bind(ms(now))
            .execute(&mut *tx)
            .await?
            .rows_affected(),
            Some(v) => sqlx::query(
                "UPDATE queues SET config = $2, updated_at = $3, version = version + 1 \
                 WHERE name = $1 AND version = $4",
            )
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

    pub(super) async fn admission_usage(
        &self,
        queue: &str,
        key: Option<&str>,
        now: DateTime<Utc>,
    ) -> StoreResult<QueueUsage> {
        let now = ms(now);
        let row: Option<(String, f64, i64)> =
            sqlx::query_as("SELECT config, tokens, refilled_at FROM queues WHERE name = $1")
                .bind(queue)
                .fetch_optional(&self.pool)
                .await?;
        let Some((json, tokens, refilled_at)) = row else {
            return Ok(QueueUsage::default());
        };
        let config = parse(queue, &json)?;
        let leased: i64 =
            sqlx::query_scalar("SELECT count(*) FROM tasks WHERE queue = $1 AND state = 'leased'")
                .bind(queue)
                .fetch_one(&self.pool)
                .await?;
        let mut usage = QueueUsage {
            tokens: config
                .rate_limit
                .map(|l| l.refill(tokens, refilled_at, now)),
            leased: leased.max(0) as u64,
            ..QueueUsage::default()
        };
        if let Some(key) = key {
            usage.key_holders = sqlx::query_scalar(
                "SELECT id FROM tasks WHERE queue = $1 AND state = 'leased' \
                 AND concurrency_key = $2 ORDER BY seq LIMIT 100",
            )
            .bind(queue)
            .bind(key)
            .fetch_all(&self.pool)
            .await?;
            if let Some(limit) = config.per_key_rate_limit {
                let b: Option<(f64, i64)> = sqlx::query_as(
                    "SELECT tokens, refilled_at FROM queue_key_tokens \
                     WHERE queue = $1 AND key = $2",
                )
                .bind(queue)
                .bind(key)
                .fetch_optional(&self.pool)
                .await?;
                usage.key_tokens =
                    Some(b.map_or(limit.capacity(), |(t, at)| limit.refill(t, at, now)));
            }
        }
        usage.config = config;
        Ok(usage)
    }

    pub(super) async fn admission_ahead(
        &self,
        t: &TaskRecord,
        aging_ms: Option<i64>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let now = ms(now);
        let config: Option<String> =
            sqlx::query_scalar("SELECT config FROM queues WHERE name = $1")
                .bind(&t.queue)
                .fetch_optional(&self.pool)
                .await?;
        let fair = match config {
            Some(json) => parse(&t.queue, &json)?.fairness == Fairness::RoundRobinKeys,
            None => false,
        };
        // The READY tasks ranked as the gated lease ranks them (see `candidates`),
        // counted up to the task's own place.
        let n: i64 = sqlx::query_scalar(
            "WITH r AS (SELECT seq, eff, last, COALESCE(deadline, 9223372036854775807) AS dl, \
               run_at, CASE WHEN $5 THEN row_number() OVER (PARTITION BY \
                 COALESCE(concurrency_key, ''), eff ORDER BY deadline ASC NULLS LAST, run_at, seq) \
               ELSE 1 END AS krn \
               FROM (SELECT seq, concurrency_key, deadline, run_at, \
                 CASE WHEN $3 > 0 THEN priority + GREATEST($2 - run_at, 0) / $3 \
                 ELSE priority END AS eff, \
                 CASE WHEN $5 THEN COALESCE((SELECT k.served FROM queue_key_turns k \
                   WHERE k.queue = $1 AND k.key = COALESCE(tasks.concurrency_key, '')), 0) \
                 ELSE 0 END AS last \
                 FROM (SELECT * FROM tasks WHERE state = 'pending' AND NOT waiting AND queue = $1 \
                   UNION ALL SELECT * FROM tasks WHERE state = 'pending' AND waiting AND queue = $1 \
                   AND run_at <= $2) tasks \
                 WHERE run_at <= $2 AND COALESCE(deadline, 9223372036854775807) > $2) a) \
             SELECT count(*) FROM r, r m WHERE m.seq = $4 AND r.seq <> m.seq \
               AND (r.eff > m.eff OR (r.eff = m.eff AND (r.krn, r.last, r.dl, r.run_at, r.seq) \
                 < (m.krn, m.last, m.dl, m.run_at, m.seq)))",
        )
        .bind(&t.queue)
        .bind(now)
        .bind(aging_ms.unwrap_or(0))
        .bind(t.seq)
        .bind(fair)
        .fetch_one(&self.pool)
        .await?;
        Ok(n.max(0) as u64)
    }
}

impl PostgresStore {
    /// Deletes the per-key buckets full again at `now` (one DELETE per queue with
    /// a per-key rate limit) and those of queues without one. A gated lease that
    /// read a bucket before it went writes it back whole (an absent bucket is a
    /// full one, which is what it read); one that commits first leaves a bucket
    /// this DELETE, re-checking the row it would delete, no longer finds full.
    pub(super) async fn admission_key_tokens_purge(&self, now: DateTime<Utc>) -> StoreResult<u64> {
        let now = ms(now);
        let mut limited: Vec<String> = Vec::new();
        let mut fair: Vec<String> = Vec::new();
        let mut n = 0;
        for q in self.admission_queue_list().await? {
            if q.config.fairness == Fairness::RoundRobinKeys {
                fair.push(q.name.clone());
            }
            let Some(l) = q.config.per_key_rate_limit else {
                continue;
            };
            n += sqlx::query(
                "DELETE FROM queue_key_tokens WHERE queue = $1 \
                 AND tokens + GREATEST($2 - refilled_at, 0)::float8 * $3 / 1000.0 >= $4",
            )
            .bind(&q.name)
            .bind(now)
            .bind(l.per_second)
            .bind(l.capacity())
            .execute(&self.pool)
            .await?
            .rows_affected();
            limited.push(q.name);
        }
        n += sqlx::query("DELETE FROM queue_key_tokens WHERE queue <> ALL($1::text[])")
            .bind(&limited)
            .execute(&self.pool)
            .await?
            .rows_affected();
        // Round robin's turns: those of queues without it, and those served so
        // long ago that an absent row ranks them the same.
        sqlx::query(
            "DELETE FROM queue_key_turns t WHERE t.queue <> ALL($1::text[]) \
             OR t.served < (SELECT q.served FROM queues q WHERE q.name = t.queue) - $2",
        )
        .bind(&fair)
        .bind(crate::domain::admission::TURNS_KEPT)
        .execute(&self.pool)
        .await?;
        Ok(n)
    }
}
