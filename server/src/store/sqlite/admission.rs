//! Admission (#14) on SQLite: stored queue settings and the gated lease.
//!
//! The gated lease runs in the writer's batch like every write: SQLite has one
//! writer, so the leases counted and the tokens read here are exactly what the
//! next lease sees; nothing else can lease between the count and the update.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};
use sqlx::SqlitePool;

use super::super::admission::{Assigned, MAX_PASSES, WINDOW_FACTOR, assign};
use super::super::row::{TaskRow, duration_ms, from_ms, ms, sort_lease_order};
use super::super::*;
use super::ops::{task_columns, task_row};
use crate::domain::admission::{Candidate, Fairness, QueueConfig, QueueUse, admit};

fn parse(name: &str, json: &str) -> StoreResult<QueueConfig> {
    serde_json::from_str(json)
        .map_err(|e| StoreError::Corrupt(format!("queue {name} settings: {e}")))
}

fn to_json(c: &QueueConfig) -> StoreResult<String> {
    serde_json::to_string(c).map_err(|e| StoreError::Internal(Box::new(e)))
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

/// What the gated lease knows of one queue, and its bucket as read.
fn load_use(c: &Connection, queue: &str, now: i64) -> StoreResult<QueueUse> {
    let row: Option<(String, f64, i64)> = c
        .prepare_cached("SELECT config, tokens, refilled_at FROM queues WHERE name = ?1")?
        .query_row(params![queue], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let Some((json, tokens, refilled_at)) = row else {
        return Ok(QueueUse::default());
    };
    let config = parse(queue, &json)?;
    let mut usage = QueueUse {
        tokens: config
            .rate_limit
            .map(|l| l.refill(tokens, refilled_at, now)),
        ..QueueUse::default()
    };
    if config.max_concurrent > 0 {
        usage.leased = c
            .prepare_cached("SELECT count(*) FROM tasks WHERE queue = ?1 AND state = 'leased'")?
            .query_row(params![queue], |r| r.get::<_, i64>(0))?
            .max(0) as u64;
    }
    if config.max_concurrent_per_key > 0 {
        let mut st = c.prepare_cached(
            "SELECT concurrency_key, count(*) FROM tasks WHERE queue = ?1 AND state = 'leased' \
             AND concurrency_key IS NOT NULL GROUP BY concurrency_key",
        )?;
        let rows = st.query_map(params![queue], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
        })?;
        for row in rows {
            let (k, n) = row?;
            usage.leased_per_key.insert(k, n.max(0) as u64);
        }
    }
    usage.config = config;
    Ok(usage)
}

/// Loads the per-key buckets of `keys` not loaded yet (refilled to `now`).
fn load_key_tokens(
    c: &Connection,
    queue: &str,
    usage: &mut QueueUse,
    keys: &[&str],
    now: i64,
) -> StoreResult<()> {
    let Some(limit) = usage.config.per_key_rate_limit else {
        return Ok(());
    };
    let missing: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| !usage.key_tokens.contains_key(*k))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let list = serde_json::to_string(&missing).map_err(|e| StoreError::Internal(Box::new(e)))?;
    let mut st = c.prepare_cached(
        "SELECT key, tokens, refilled_at FROM queue_key_tokens WHERE queue = ?1 \
         AND key IN (SELECT value FROM json_each(?2))",
    )?;
    let rows = st.query_map(params![queue, list], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, f64>(1)?,
            r.get::<_, i64>(2)?,
        ))
    })?;
    for row in rows {
        let (k, t, at) = row?;
        usage.key_tokens.insert(k, limit.refill(t, at, now));
    }
    for k in missing {
        usage
            .key_tokens
            .entry(k.to_string())
            .or_insert_with(|| limit.capacity());
    }
    Ok(())
}

/// The worker a gated lease is for (routing, issue 13).
struct Who<'a> {
    worker: &'a str,
    /// Its labels as a JSON object.
    labels: String,
}

/// Routing (issue 13) in the gated candidate scan: whether the worker (?7, with
/// labels ?8) may take the row: its target, a retry reserved for another worker,
/// and of a distinct fan-out group only the first pending copy, and none when the
/// worker holds or completed one (so one lease never takes two copies).
const GATED_MAY_TAKE: &str = "(target_worker IS NULL OR target_worker = ?7) \
    AND (target_labels IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(tasks.target_labels) j \
      WHERE j.value IS NOT (SELECT w.value FROM json_each(?8) w WHERE w.key = j.key))) \
    AND (reserved_for IS NULL OR reserved_for = ?7 OR reserved_until <= ?2) \
    AND (fanout_distinct = 0 OR (NOT EXISTS (SELECT 1 FROM tasks c \
        WHERE c.fanout_group = tasks.fanout_group AND c.leased_by = ?7 \
          AND c.state IN ('leased', 'succeeded')) \
      AND seq = (SELECT min(c.seq) FROM tasks c \
        WHERE c.fanout_group = tasks.fanout_group AND c.state = 'pending')))";

/// The candidate scan: READY tasks of the queue in effective lease order,
/// leaving out closed keys and tasks already admitted.
#[allow(clippy::too_many_arguments)]
fn candidates(
    c: &Connection,
    queue: &str,
    config: &QueueConfig,
    closed: &[String],
    taken: &[i64],
    limit: usize,
    now: i64,
    who: &Who<'_>,
) -> StoreResult<Vec<Candidate>> {
    let aging = config.aging_ms().unwrap_or(0);
    let turn = if config.fairness == Fairness::RoundRobinKeys {
        "row_number() OVER (PARTITION BY COALESCE(concurrency_key, ''), eff \
         ORDER BY deadline IS NULL, deadline, run_at, seq)"
    } else {
        "1"
    };
    let eff = if aging > 0 {
        "priority + MAX(?2 - run_at, 0) / ?6"
    } else {
        "priority + 0 * ?6"
    };
    let sql = format!(
        "SELECT seq, concurrency_key, eff, turn, COALESCE(deadline, 9223372036854775807), run_at, \
           size FROM (SELECT seq, concurrency_key, deadline, run_at, eff, size, {turn} AS turn \
           FROM (SELECT seq, concurrency_key, deadline, run_at, {eff} AS eff, \
             length(payload) + COALESCE(length(checkpoint), 0) + length(metadata) + {extra} AS size \
             FROM tasks WHERE state = 'pending' AND queue = ?1 AND run_at <= ?2 \
             AND (deadline IS NULL OR deadline > ?2) \
             AND (concurrency_key IS NULL OR concurrency_key NOT IN (SELECT value FROM json_each(?3))) \
             AND seq NOT IN (SELECT value FROM json_each(?4)) AND {may_take} \
             ORDER BY priority DESC, deadline IS NULL, deadline, run_at, seq{cap})) \
         ORDER BY eff DESC, turn, deadline IS NULL, deadline, run_at, seq LIMIT ?5",
        extra = LEASE_REPLY_TASK_BYTES,
        may_take = GATED_MAY_TAKE,
        // Without aging or fairness the index order is the lease order: read only
        // the first rows. With them, every READY row of the queue is ranked.
        cap = if aging == 0 && turn == "1" {
            " LIMIT ?5"
        } else {
            ""
        },
    );
    let closed = serde_json::to_string(closed).map_err(|e| StoreError::Internal(Box::new(e)))?;
    let taken = serde_json::to_string(taken).map_err(|e| StoreError::Internal(Box::new(e)))?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut st = c.prepare_cached(&sql)?;
    let rows = st.query_map(
        params![
            queue, now, closed, taken, limit, aging, who.worker, who.labels
        ],
        |r| {
            Ok(Candidate {
                seq: r.get(0)?,
                key: r.get(1)?,
                order: (r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(0)?),
                size: r.get(6)?,
            })
        },
    )?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// The tasks one queue's gates admit now, at most `demand`, in lease order.
fn admit_queue(
    c: &Connection,
    queue: &str,
    usage: &mut QueueUse,
    demand: usize,
    now: i64,
    who: &Who<'_>,
) -> StoreResult<Vec<Candidate>> {
    let budget = usage.budget(demand);
    let mut out: Vec<Candidate> = Vec::new();
    let mut closed = usage.closed_keys();
    let mut taken: Vec<i64> = Vec::new();
    let mut per_key: HashMap<String, u64> = HashMap::new();
    for _ in 0..MAX_PASSES {
        let want = budget - out.len();
        if want == 0 {
            break;
        }
        let window = want * WINDOW_FACTOR + 16;
        let cands = candidates(c, queue, &usage.config, &closed, &taken, window, now, who)?;
        let keys: Vec<&str> = cands.iter().filter_map(|c| c.key.as_deref()).collect();
        load_key_tokens(c, queue, usage, &keys, now)?;
        let (picks, newly_closed) = admit(&cands, usage, want, &mut per_key);
        for &i in &picks {
            taken.push(cands[i].seq);
            out.push(cands[i].clone());
        }
        closed.extend(newly_closed);
        if cands.len() < window {
            break;
        }
    }
    Ok(out)
}

/// Routing (issue 13) in a gated queue: each request is served alone, so its
/// worker's target, labels, reservations, fan-out copies and per-worker cap are
/// checked in the candidate scan, exactly for that worker.
pub(super) fn task_lease_gated(
    c: &Connection,
    ps: &[LeaseParams],
) -> StoreResult<Vec<Vec<TaskRecord>>> {
    let mut out = Vec::with_capacity(ps.len());
    for p in ps {
        let mut one = lease_one(c, std::slice::from_ref(p))?;
        out.push(one.pop().unwrap_or_default());
    }
    Ok(out)
}

fn lease_one(c: &Connection, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>> {
    let Some(first) = ps.first() else {
        return Ok(Vec::new());
    };
    let who = Who {
        worker: &first.worker_id,
        labels: first.routing.labels_json(),
    };
    let now = ms(ps.iter().map(|p| p.now).max().unwrap_or(first.now));
    let demand: usize = ps.iter().map(|p| p.max_tasks as usize).sum();
    let mut admitted = Vec::new();
    let mut uses = Vec::new();
    for (qi, queue) in first.queues.iter().enumerate() {
        let mut usage = load_use(c, queue, now)?;
        // The worker's cap in this queue (routing): what it holds counts.
        let demand = match first.routing.max_leases_per_worker.get(queue) {
            Some(&cap) if cap > 0 => {
                let held: i64 = c
                    .prepare_cached(
                        "SELECT count(*) FROM tasks WHERE queue = ?1 AND state = 'leased' \
                         AND leased_by = ?2",
                    )?
                    .query_row(params![queue, who.worker], |r| r.get(0))?;
                demand.min(usize::try_from(i64::from(cap) - held).unwrap_or(0))
            }
            _ => demand,
        };
        let picks = admit_queue(c, queue, &mut usage, demand, now, &who)?;
        admitted.extend(picks.into_iter().map(|p| (qi, p)));
        uses.push(usage);
    }
    let assigned = assign(admitted, ps);
    let mut out: Vec<Vec<TaskRecord>> = ps.iter().map(|_| Vec::new()).collect();
    let mut charged: Vec<(usize, Option<String>)> = Vec::new();
    let sql = format!(
        "UPDATE tasks SET state = 'leased', attempt = attempt + 1, \
         fencing_token = fencing_token + 1, lease_token = lower(hex(randomblob(16))), \
         leased_by = ?1, lease_duration_ms = ?2, \
         lease_expires_at = MIN(?3, COALESCE(deadline, 9223372036854775807)), updated_at = ?4, \
         leased_at = ?4, leased_address = ?5 \
         WHERE seq = ?6 AND state = 'pending' RETURNING {}",
        task_columns!()
    );
    let mut update = c.prepare_cached(&sql)?;
    for Assigned {
        cand,
        queue,
        request,
    } in assigned
    {
        let p = &ps[request];
        let lease_ms = duration_ms(p.lease_duration);
        let row: Option<TaskRow> = update
            .query_row(
                params![
                    p.worker_id,
                    lease_ms,
                    now.saturating_add(lease_ms),
                    now,
                    p.worker_address,
                    cand.seq
                ],
                task_row,
            )
            .optional()?;
        if let Some(row) = row {
            charged.push((queue, row.concurrency_key.clone()));
            out[request].push(row.into_record()?);
        }
    }
    charge(c, &first.queues, &uses, &charged, now)?;
    for records in &mut out {
        sort_lease_order(records);
    }
    Ok(out)
}

/// Takes one token per lease granted from the queue's and the key's buckets.
fn charge(
    c: &Connection,
    queues: &[String],
    uses: &[QueueUse],
    charged: &[(usize, Option<String>)],
    now: i64,
) -> StoreResult<()> {
    for (qi, queue) in queues.iter().enumerate() {
        let usage = &uses[qi];
        let (tokens, key_tokens) = (&usage.tokens, &usage.key_tokens);
        let granted = charged.iter().filter(|(q, _)| *q == qi);
        if let Some(t) = tokens {
            let n = granted.clone().count() as f64;
            c.prepare_cached("UPDATE queues SET tokens = ?2, refilled_at = ?3 WHERE name = ?1")?
                .execute(params![queue, t - n, now])?;
        }
        if let Some(limit) = usage.config.per_key_rate_limit {
            let mut per_key: HashMap<&str, f64> = HashMap::new();
            for (_, k) in granted {
                if let Some(k) = k {
                    *per_key.entry(k).or_default() += 1.0;
                }
            }
            let mut put = c.prepare_cached(
                "INSERT INTO queue_key_tokens (queue, key, tokens, refilled_at) \
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (queue, key) DO UPDATE SET \
                 tokens = excluded.tokens, refilled_at = excluded.refilled_at",
            )?;
            for (k, n) in per_key {
                let before = key_tokens
                    .get(k)
                    .copied()
                    .unwrap_or_else(|| limit.capacity());
                put.execute(params![queue, k, before - n, now])?;
            }
        }
    }
    Ok(())
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
    let mine = crate::domain::admission::effective_priority(
        i64::from(t.priority),
        ms(t.run_at),
        now,
        aging_ms,
    );
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT seq, CASE WHEN ?4 > 0 THEN priority + MAX(?2 - run_at, 0) / ?4 \
           ELSE priority END AS eff FROM tasks WHERE state = 'pending' AND queue = ?1 \
           AND run_at <= ?2 AND (deadline IS NULL OR deadline > ?2) AND seq <> ?5) \
         WHERE eff > ?3 OR (eff = ?3 AND seq < ?5)",
    )
    .bind(&t.queue)
    .bind(now)
    .bind(mine)
    .bind(aging)
    .bind(t.seq)
    .fetch_one(r)
    .await?;
    Ok(n.max(0) as u64)
}
