//! Admission on SQLite: stored queue settings and the gated lease.
//!
//! The gated lease runs in the writer's batch like every write: SQLite has one
//! writer, so the leases counted and the tokens read here are exactly what the
//! next lease sees; nothing else can lease between the count and the update.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, params};
use sqlx::SqlitePool;

use super::super::row::{from_ms, ms};
use super::super::*;
use crate::domain::admission::{Fairness, QueueConfig};

pub(super) fn parse(name: &str, json: &str) -> StoreResult<QueueConfig> {
    serde_json::from_str(json)
        .map_err(|e| StoreError::Corrupt(format!("queue {name} settings: {e}")))
}

fn to_json(c: &QueueConfig) -> StoreResult<String> {
    serde_json::to_string(c).map_err(|e| StoreError::Internal(Box::new(e)))
}

pub(super) fn json_text<T: serde::Serialize + ?Sized>(v: &T) -> StoreResult<String> {
    serde_json::to_string(v).map_err(|e| StoreError::Internal(Box::new(e)))
}

pub(super) async fn queue_list(r: &SqlitePool) -> StoreResult<Vec<StoredQueue>> {
    let rows: Vec<(String, String, Option<i64>, i64)> =
        sqlx::query_as("SELECT name, config, updated_at, version FROM queues ORDER BY name")
            .fetch_all(r)
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

pub(super) fn queue_seed(c: &Connection, seed: &[(String, QueueConfig)]) -> StoreResult<()> {
    let names: Vec<&str> = seed.iter().map(|(n, _)| n.as_str()).collect();
    let names = serde_json::to_string(&names).map_err(|e| StoreError::Internal(Box::new(e)))?;
    c.prepare_cached(
        "DELETE FROM queues WHERE updated_at IS NULL \
         AND name NOT IN (SELECT value FROM json_each(?1))",
    )?
    .execute(params![names])?;
    let mut put = c.prepare_cached(
        "INSERT INTO queues (name, config) VALUES (?1, ?2) \
         ON CONFLICT (name) DO UPDATE SET config = excluded.config, version = version + 1 \
         WHERE queues.updated_at IS NULL AND queues.config <> excluded.config",
    )?;
    for (name, config) in seed {
        put.execute(params![name, to_json(config)?])?;
    }
    Ok(())
}

pub(super) fn queue_put(
    c: &Connection,
    name: &str,
    config: &QueueConfig,
    version: Option<i64>,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let json = to_json(config)?;
    let n = match version {
        None => c
            .prepare_cached(
                "INSERT INTO queues (name, config, updated_at, version) VALUES (?1, ?2, ?3, 1) \
                 ON CONFLICT (name) DO NOTHING",
            )?
            .execute(params![name, json, ms(now)])?,
        Some(v) => c
            .prepare_cached(
                "UPDATE queues SET config = ?2, updated_at = ?3, version = version + 1 \
                 WHERE name = ?1 AND version = ?4",
            )?
            .execute(params![name, json, ms(now), v])?,
    };
    Ok(n == 1)
}

/// Deletes the per-key buckets full again at `now` and those of queues without
/// a per-key rate limit; in the writer's batch, so no lease runs meanwhile.
pub(super) fn key_tokens_purge(c: &Connection, now: DateTime<Utc>) -> StoreResult<u64> {
    let now = ms(now);
    let mut st = c.prepare_cached("SELECT name, config FROM queues")?;
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
            .prepare_cached(
                "DELETE FROM queue_key_tokens WHERE queue = ?1 \
                 AND tokens + MAX(?2 - refilled_at, 0) * ?3 / 1000.0 >= ?4",
            )?
            .execute(params![name, now, l.per_second, l.capacity()])?;
        limited.push(name);
    }
    n += c
        .prepare_cached(
            "DELETE FROM queue_key_tokens WHERE queue NOT IN (SELECT value FROM json_each(?1))",
        )?
        .execute(params![json_text(&limited)?])?;
    // Round robin's turns: those of queues without it, and those served so long
    // ago that an absent row ranks them the same.
    c.prepare_cached(
        "DELETE FROM queue_key_turns WHERE queue NOT IN (SELECT value FROM json_each(?1)) \
         OR served < (SELECT q.served FROM queues q WHERE q.name = queue_key_turns.queue) - ?2",
    )?
    .execute(params![
        json_text(&fair)?,
        crate::domain::admission::TURNS_KEPT
    ])?;
    Ok(n as u64)
}

pub(super) async fn queue_usage(
    r: &SqlitePool,
    queue: &str,
    key: Option<&str>,
    now: DateTime<Utc>,
) -> StoreResult<QueueUsage> {
    let now = ms(now);
    let row: Option<(String, f64, i64)> =
        sqlx::query_as("SELECT config, tokens, refilled_at FROM queues WHERE name = ?1")
            .bind(queue)
            .fetch_optional(r)
            .await?;
    let Some((json, tokens, refilled_at)) = row else {
        return Ok(QueueUsage::default());
    };
    let config = parse(queue, &json)?;
    let leased: i64 =
        sqlx::query_scalar("SELECT count(*) FROM tasks WHERE queue = ?1 AND state = 'leased'")
            .bind(queue)
            .fetch_one(r)
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
            "SELECT id FROM tasks WHERE queue = ?1 AND state = 'leased' \
             AND concurrency_key = ?2 ORDER BY seq LIMIT 100",
        )
        .bind(queue)
        .bind(key)
        .fetch_all(r)
        .await?;
        if let Some(limit) = config.per_key_rate_limit {
            let b: Option<(f64, i64)> = sqlx::query_as(
                "SELECT tokens, refilled_at FROM queue_key_tokens WHERE queue = ?1 AND key = ?2",
            )
            .bind(queue)
            .bind(key)
            .fetch_optional(r)
            .await?;
            usage.key_tokens = Some(b.map_or(limit.capacity(), |(t, at)| limit.refill(t, at, now)));
        }
    }
    usage.config = config;
    Ok(usage)
}

pub(super) async fn task_ahead(
    r: &SqlitePool,
    t: &TaskRecord,
    aging_ms: Option<i64>,
    now: DateTime<Utc>,
) -> StoreResult<u64> {
    let aging = aging_ms.unwrap_or(0);
    let now = ms(now);
    let config: Option<String> = sqlx::query_scalar("SELECT config FROM queues WHERE name = ?1")
        .bind(&t.queue)
        .fetch_optional(r)
        .await?;
    let fair = match config {
        Some(json) => parse(&t.queue, &json)?.fairness == Fairness::RoundRobinKeys,
        None => false,
    };
    // The READY tasks ranked as the gated lease ranks them (see `candidates`),
    // counted up to the task's own place.
    let n: i64 = sqlx::query_scalar(
        "WITH r AS (SELECT seq, eff, last, COALESCE(deadline, 9223372036854775807) AS dl, run_at, \
           CASE WHEN ?5 THEN row_number() OVER (PARTITION BY COALESCE(concurrency_key, ''), eff \
             ORDER BY deadline IS NULL, deadline, run_at, seq) ELSE 1 END AS krn \
           FROM (SELECT seq, concurrency_key, deadline, run_at, \
             CASE WHEN ?3 > 0 THEN priority + MAX(?2 - run_at, 0) / ?3 ELSE priority END AS eff, \
             CASE WHEN ?5 THEN COALESCE((SELECT k.served FROM queue_key_turns k \
               WHERE k.queue = ?1 AND k.key = COALESCE(tasks.concurrency_key, '')), 0) \
             ELSE 0 END AS last \
             FROM (SELECT * FROM tasks WHERE state = 'pending' AND waiting = 0 AND queue = ?1 \
               UNION ALL SELECT * FROM tasks WHERE state = 'pending' AND waiting = 1 \
               AND queue = ?1 AND run_at <= ?2) tasks \
             WHERE run_at <= ?2 AND (deadline IS NULL OR deadline > ?2))) \
         SELECT count(*) FROM r, r m WHERE m.seq = ?4 AND r.seq <> m.seq \
           AND (r.eff > m.eff OR (r.eff = m.eff AND (r.krn, r.last, r.dl, r.run_at, r.seq) \
             < (m.krn, m.last, m.dl, m.run_at, m.seq)))",
    )
    .bind(&t.queue)
    .bind(now)
    .bind(aging)
    .bind(t.seq)
    .bind(fair)
    .fetch_one(r)
    .await?;
    Ok(n.max(0) as u64)
}
