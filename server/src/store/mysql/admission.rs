//! Admission on MySQL: stored queue settings, shared by every replica. (The
//! gated lease is in `lease.rs`.)

use chrono::{DateTime, Utc};
use sqlx::{MySql, MySqlPool};

use super::super::row::{from_ms, ms};
use super::super::*;
use super::Job;
use crate::domain::admission::{Fairness, QueueConfig};

pub(super) fn parse(name: &str, json: &str) -> StoreResult<QueueConfig> {
    serde_json::from_str(json)
        .map_err(|e| StoreError::Corrupt(format!("queue {name} settings: {e}")))
}

fn to_json(c: &QueueConfig) -> StoreResult<String> {
    serde_json::to_string(c).map_err(|e| StoreError::Internal(Box::new(e)))
}

pub(super) async fn queue_list(r: &MySqlPool) -> StoreResult<Vec<StoredQueue>> {
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

pub(super) async fn queue_seed(j: &mut Job, seed: &[(String, QueueConfig)]) -> StoreResult<()> {
    let mut qb = sqlx::QueryBuilder::<MySql>::new("DELETE FROM queues WHERE updated_at IS NULL");
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
        let stored: Option<(String, Option<i64>)> =
            sqlx::query_as("SELECT config, updated_at FROM queues WHERE name = ? FOR UPDATE")
                .bind(name)
                .fetch_optional(j.conn())
                .await?;
        match stored {
            None => {
                sqlx::query("INSERT IGNORE INTO queues (name, config) VALUES (?, ?)")
                    .bind(name)
                    .bind(&json)
                    .execute(j.conn())
                    .await?;
            }
            Some((old, None)) if old != json => {
                sqlx::query(
                    "UPDATE queues SET config = ?, version = version + 1 WHERE name = ? \
                     AND updated_at IS NULL",
                )
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

pub(super) async fn queue_put(
    j: &mut Job,
    name: &str,
    config: &QueueConfig,
    version: Option<i64>,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let json = to_json(config)?;
    let n = match version {
        None => sqlx::query(
            "INSERT IGNORE INTO queues (name, config, updated_at, version) VALUES (?, ?, ?, 1)",
        )
        .bind(name)
        .bind(json)
        .bind(ms(now))
        .execute(j.conn())
        .await?
        .rows_affected(),
        Some(v) => sqlx::query(
            "UPDATE queues SET config = ?, updated_at = ?, version = version + 1 \
             WHERE name = ? AND version = ?",
        )
        .bind(json)
        .bind(ms(now))
        .bind(name)
        .bind(v)
        .execute(j.conn())
        .await?
        .rows_affected(),
    };
    Ok(n == 1)
}

/// Deletes the per-key buckets full again at `now` and those of queues without
/// a per-key rate limit, and round robin's turns no longer needed.
pub(super) async fn key_tokens_purge(j: &mut Job, now: DateTime<Utc>) -> StoreResult<u64> {
    let now = ms(now);
    let queues: Vec<(String, String)> = sqlx::query_as("SELECT name, config FROM queues")
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
        n += sqlx::query(
            "DELETE FROM queue_key_tokens WHERE queue = ? \
             AND tokens + GREATEST(? - refilled_at, 0) * ? / 1000.0 >= ?",
        )
        .bind(&name)
        .bind(now)
        .bind(l.per_second)
        .bind(l.capacity())
        .execute(j.conn())
        .await?
        .rows_affected();
        limited.push(name);
    }
    let mut qb = sqlx::QueryBuilder::<MySql>::new("DELETE FROM queue_key_tokens");
    not_in(&mut qb, " WHERE queue NOT IN (", &limited);
    n += qb.build().execute(j.conn()).await?.rows_affected();
    let mut qb = sqlx::QueryBuilder::<MySql>::new("DELETE FROM queue_key_turns");
    not_in(&mut qb, " WHERE queue NOT IN (", &fair);
    qb.build().execute(j.conn()).await?;
    for q in &fair {
        sqlx::query(
            "DELETE FROM queue_key_turns WHERE queue = ? \
             AND served < (SELECT served FROM queues WHERE name = ?) - ?",
        )
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

pub(super) async fn queue_usage(
    r: &MySqlPool,
    queue: &str,
    key: Option<&str>,
    now: DateTime<Utc>,
) -> StoreResult<QueueUsage> {
    let now = ms(now);
    let row: Option<(String, f64, i64)> =
        sqlx::query_as("SELECT config, tokens, refilled_at FROM queues WHERE name = ?")
            .bind(queue)
            .fetch_optional(r)
            .await?;
    let Some((json, tokens, refilled_at)) = row else {
        return Ok(QueueUsage::default());
    };
    let config = parse(queue, &json)?;
    let leased: i64 =
        sqlx::query_scalar("SELECT count(*) FROM tasks WHERE state = 'leased' AND queue = ?")
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
            "SELECT id FROM tasks WHERE state = 'leased' AND queue = ? \
             AND concurrency_key = ? ORDER BY seq LIMIT 100",
        )
        .bind(queue)
        .bind(key)
        .fetch_all(r)
        .await?;
        if let Some(limit) = config.per_key_rate_limit {
            let b: Option<(f64, i64)> = sqlx::query_as(
                "SELECT tokens, refilled_at FROM queue_key_tokens WHERE queue = ? AND `key` = ?",
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
    r: &MySqlPool,
    t: &TaskRecord,
    aging_ms: Option<i64>,
    now: DateTime<Utc>,
) -> StoreResult<u64> {
    let aging = aging_ms.unwrap_or(0);
    let now = ms(now);
    let config: Option<String> = sqlx::query_scalar("SELECT config FROM queues WHERE name = ?")
        .bind(&t.queue)
        .fetch_optional(r)
        .await?;
    let fair = match config {
        Some(json) => parse(&t.queue, &json)?.fairness == Fairness::RoundRobinKeys,
        None => false,
    };
    let eff = if aging > 0 {
        format!("CAST(priority + FLOOR(GREATEST({now} - run_at, 0) / {aging}) AS SIGNED)")
    } else {
        "priority".to_string()
    };
    let (last, krn) = if fair {
        (
            "COALESCE((SELECT k.served FROM queue_key_turns k WHERE k.queue = tasks.queue \
             AND k.`key` = COALESCE(tasks.concurrency_key, '')), 0)",
            "row_number() OVER (PARTITION BY COALESCE(concurrency_key, ''), eff \
             ORDER BY lease_deadline, run_at, seq)",
        )
    } else {
        ("0", "1")
    };
    // The READY tasks ranked as the gated lease ranks them, counted up to the
    // task's own place.
    let sql = format!(
        "WITH r AS (SELECT seq, eff, last, lease_deadline AS dl, run_at, {krn} AS krn \
           FROM (SELECT seq, concurrency_key, lease_deadline, run_at, {eff} AS eff, \
             {last} AS last FROM tasks WHERE state = 'pending' AND queue = ? AND run_at <= ? \
             AND lease_deadline > ?) x) \
         SELECT count(*) FROM r, r m WHERE m.seq = ? AND r.seq <> m.seq \
           AND (r.eff > m.eff OR (r.eff = m.eff AND (r.krn, r.last, r.dl, r.run_at, r.seq) \
             < (m.krn, m.last, m.dl, m.run_at, m.seq)))"
    );
    let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(&t.queue)
        .bind(now)
        .bind(now)
        .bind(t.seq)
        .fetch_one(r)
        .await?;
    Ok(n.max(0) as u64)
}
