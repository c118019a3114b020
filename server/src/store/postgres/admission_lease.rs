//! The gated lease on Postgres: under the locks of its gated queues' rows, the
//! candidates each request may take, admitted against the queues' and keys'
//! limits and buckets, then leased (see `admission.rs` for how the limits hold
//! for the whole cluster).

use std::collections::{HashMap, HashSet};

use sqlx::{Postgres, Transaction};

use super::super::admission::{Assigned, MAX_PASSES, Offer, Plan, SortKey, window};
use super::super::row::{TaskRow, duration_ms, ms, sort_lease_order};
use super::super::*;
use super::PostgresStore;
use super::admission::parse;
use crate::domain::admission::{Candidate, Fairness, QueueConfig, QueueUse};

type Tx<'a> = Transaction<'a, Postgres>;

/// id, seq, concurrency key, effective priority, turn, deadline, run_at, size, the
/// requests that may take it (0-based; NULL: all), its distinct fan-out group.
type CandidateRow = (
    String,
    i64,
    Option<String>,
    i64,
    i64,
    i64,
    i64,
    i64,
    Option<Vec<i32>>,
    Option<String>,
);

impl PostgresStore {
    /// The gated lease of a batch of requests for the same queues, served
    /// together in one transaction: one lock of the queue rows, one count of the
    /// leases held, one candidate scan (more only when keys close along the way),
    /// one UPDATE. Routing: each candidate row comes with the requests
    /// whose workers may take it (`elig`); [`Plan`] hands the rows out in lease
    /// order within the gates, the caps and the reply budgets.
    pub(super) async fn admission_lease(
        &self,
        ps: &[LeaseParams],
    ) -> StoreResult<Vec<Vec<TaskRecord>>> {
        let Some(first) = ps.first() else {
            return Ok(Vec::new());
        };
        let queues = &first.queues;
        let now = ms(ps.iter().map(|p| p.now).max().unwrap_or(first.now));
        let batch = Batch {
            workers: ps.iter().map(|p| p.worker_id.clone()).collect(),
            labels: ps.iter().map(|p| p.routing.labels_json()).collect(),
        };
        // Scheduled tasks now due join the lease index first (a statement of its
        // own: no lock on them is held through the transaction below).
        self.promote(queues, now).await?;
        let mut tx = self.pool.begin().await?;
        // The serialisation point: see the module comment.
        let mut sorted = queues.clone();
        sorted.sort_unstable();
        let rows: Vec<(String, String, f64, i64)> = sqlx::query_as(
            "SELECT name, config, tokens, refilled_at FROM queues WHERE name = ANY($1) \
             ORDER BY name FOR UPDATE",
        )
        .bind(&sorted)
        .fetch_all(&mut *tx)
        .await?;
        let stored: HashMap<String, (String, f64, i64)> = rows
            .into_iter()
            .map(|(n, c, t, r)| (n, (c, t, r)))
            .collect();
        let mut uses = Vec::with_capacity(queues.len());
        for queue in queues {
            uses.push(match stored.get(queue) {
                Some((json, tokens, refilled_at)) => {
                    let config = parse(queue, json)?;
                    load_use(&mut tx, queue, config, *tokens, *refilled_at, now).await?
                }
                None => QueueUse::default(),
            });
        }
        let workers: Vec<&str> = batch.workers.iter().map(String::as_str).collect();
        super::lease::lock_workers(&mut tx, &workers).await?;
        let held = held_by_workers(&mut tx, ps).await?;
        let mut plan = Plan::new(ps, &uses, |w, q| {
            held.get(&(w.to_string(), q.to_string()))
                .copied()
                .unwrap_or(0)
        });
        let mut closed: Vec<HashSet<String>> = uses
            .iter()
            .map(|u| u.closed_keys().into_iter().collect())
            .collect();
        let mut seen: Vec<Vec<i64>> = vec![Vec::new(); queues.len()];
        let mut done = vec![false; queues.len()];
        // The candidates' ids by seq: the UPDATE finds its rows by id.
        let mut ids: HashMap<i64, String> = HashMap::new();
        for _ in 0..MAX_PASSES {
            let window = window(plan.wanted());
            if plan.wanted() == 0 {
                break;
            }
            let mut offers = Vec::new();
            let mut horizon: Option<SortKey> = None;
            for (qi, queue) in queues.iter().enumerate() {
                if done[qi] || !plan.open(qi) {
                    continue;
                }
                let closed_now: Vec<&String> = closed[qi].iter().collect();
                let cands = candidates(
                    &mut tx,
                    queue,
                    qi,
                    &uses[qi].config,
                    &closed_now,
                    &seen[qi],
                    window,
                    now,
                    &batch,
                    &mut ids,
                )
                .await?;
                let keys: Vec<&str> = cands.iter().filter_map(|o| o.cand.key.as_deref()).collect();
                load_key_tokens(&mut tx, queue, &mut uses[qi], &keys, now).await?;
                match cands.last() {
                    Some(last) if cands.len() >= window => {
                        let k = last.cand.sort_key();
                        horizon = Some(horizon.map_or(k, |h| h.min(k)));
                    }
                    _ => done[qi] = true,
                }
                offers.extend(cands);
            }
            if offers.is_empty() {
                break;
            }
            plan.walk(offers, horizon, &uses, &mut seen, &mut closed);
            if done.iter().all(|d| *d) {
                break;
            }
        }
        let assigned = plan.into_taken();
        if assigned.is_empty() {
            // Nothing to write: a bucket refills the same from its older time.
            tx.commit().await?;
            return Ok(ps.iter().map(|_| Vec::new()).collect());
        }
        let task_ids: Vec<&str> = assigned
            .iter()
            .filter_map(|a| ids.get(&a.cand.seq).map(String::as_str))
            .collect();
        let reqs: Vec<i32> = assigned
            .iter()
            .map(|a| i32::try_from(a.request + 1).unwrap_or(i32::MAX))
            .collect();
        let addresses: Vec<&str> = ps.iter().map(|p| p.worker_address.as_str()).collect();
        let durations: Vec<i64> = ps.iter().map(|p| duration_ms(p.lease_duration)).collect();
        let buckets = Buckets::new(queues, &uses, &assigned);
        // One statement: the leases (`leased`, each row re-checked as pending, so a
        // task a plain lease took meanwhile is skipped), then one token per lease
        // taken from its queue's bucket (`bucket`) and its key's (`key_bucket`),
        // and (flow) the LEASED events (`ev`).
        let rows: Vec<(TaskRow, i64)> = sqlx::query(concat!(
            "WITH picked AS (SELECT * FROM UNNEST($1::text[], $3::int[]) AS p(id, req)), ",
            super::lease_plain::lease_write!(),
            ", bucket AS ( \
               UPDATE queues q SET refilled_at = $2, \
                 tokens = b.tokens - (SELECT count(*) FROM leased l WHERE l.queue = q.name) \
               FROM UNNEST($7::text[], $8::float8[]) AS b(name, tokens) WHERE q.name = b.name), \
             key_bucket AS ( \
               INSERT INTO queue_key_tokens (queue, key, tokens, refilled_at) \
               SELECT l.queue, l.concurrency_key, b.tokens - count(*), $2 FROM leased l \
               JOIN UNNEST($9::text[], $10::text[], $11::float8[]) AS b(queue, key, tokens) \
                 ON b.queue = l.queue AND b.key = l.concurrency_key \
               GROUP BY l.queue, l.concurrency_key, b.tokens \
               ON CONFLICT (queue, key) DO UPDATE SET tokens = EXCLUDED.tokens, \
                 refilled_at = EXCLUDED.refilled_at) \
             SELECT * FROM leased",
        ))
        .bind(&task_ids)
        .bind(now)
        .bind(&reqs)
        .bind(&batch.workers)
        .bind(&addresses)
        .bind(&durations)
        .bind(&buckets.queues)
        .bind(&buckets.tokens)
        .bind(&buckets.key_queues)
        .bind(&buckets.keys)
        .bind(&buckets.key_tokens)
        .try_map(|row: sqlx::postgres::PgRow| {
            use sqlx::{FromRow, Row};
            Ok((TaskRow::from_row(&row)?, row.try_get::<i64, _>("request")?))
        })
        .fetch_all(&mut *tx)
        .await?;
        let fair = uses
            .iter()
            .any(|u| u.config.fairness == Fairness::RoundRobinKeys);
        // The rows written, in the order granted (the lease order).
        let mut rows = rows;
        if fair {
            let place: HashMap<i64, usize> = assigned
                .iter()
                .enumerate()
                .map(|(i, a)| (a.cand.seq, i))
                .collect();
            rows.sort_by_key(|(r, _)| place.get(&r.seq).copied().unwrap_or(usize::MAX));
            record_turns(&mut tx, queues, &uses, &rows).await?;
        }
        tx.commit().await?;
        let mut out: Vec<Vec<TaskRecord>> = ps.iter().map(|_| Vec::new()).collect();
        for (row, request) in rows {
            let slot = usize::try_from(request - 1)
                .ok()
                .and_then(|i| out.get_mut(i))
                .ok_or_else(|| StoreError::Corrupt(format!("lease for request {request}")))?;
            slot.push(row.into_record()?);
        }
        // Round robin: each reply in turn order (the order granted).
        if !fair {
            for records in &mut out {
                sort_lease_order(records);
            }
        }
        Ok(out)
    }
}

/// Round robin: records the keys served by the rows leased (in the order
/// granted), so the next lease of any replica, of any size, starts with the
/// keys served longest ago. Each grant of a round-robin queue takes the next
/// number of the queue's counter; a key keeps the number of its latest grant.
/// Runs under the queue row's lock, like the grant.
async fn record_turns(
    tx: &mut Tx<'_>,
    queues: &[String],
    uses: &[QueueUse],
    rows: &[(TaskRow, i64)],
) -> StoreResult<()> {
    for (queue, usage) in queues.iter().zip(uses) {
        if usage.config.fairness != Fairness::RoundRobinKeys {
            continue;
        }
        let keys: Vec<&str> = rows
            .iter()
            .filter(|(r, _)| &r.queue == queue)
            .map(|(r, _)| r.concurrency_key.as_deref().unwrap_or(""))
            .collect();
        let Some(order) = crate::domain::admission::served_order(&keys) else {
            continue;
        };
        let (names, at): (Vec<String>, Vec<i64>) = order.last.into_iter().unzip();
        sqlx::query(
            "WITH c AS (UPDATE queues SET served = served + $4 WHERE name = $1 \
               RETURNING served - $4 AS base) \
             INSERT INTO queue_key_turns (queue, key, served) \
             SELECT $1, k.key, c.base + k.at FROM c, UNNEST($2::text[], $3::bigint[]) AS k(key, at) \
             ON CONFLICT (queue, key) DO UPDATE SET served = EXCLUDED.served",
        )
        .bind(queue)
        .bind(&names)
        .bind(&at)
        .bind(order.count)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// The workers of a gated lease batch (routing), per request.
struct Batch {
    workers: Vec<String>,
    /// Each request's labels as a JSON object.
    labels: Vec<String>,
}

/// Routing in the gated candidate scan: a row anyone may take (no
/// target, no reservation, no distinct fan-out group), read from its own columns.
const GATED_OPEN: &str = "(target_worker IS NULL AND target_labels IS NULL \
    AND reserved_for IS NULL AND NOT fanout_distinct)";

/// Routing in the gated candidate scan: whether the worker of request
/// `i` (1-based; ids $7, labels $8) may take the row: its target, a retry
/// reserved for another worker, a distinct fan-out copy of a group the worker
/// holds or completed.
const GATED_MAY_TAKE: &str = "((target_worker IS NULL OR target_worker = ($7::text[])[i]) \
    AND (target_labels IS NULL OR target_labels::jsonb <@ ($8::text[])[i]::jsonb) \
    AND (reserved_for IS NULL OR reserved_for = ($7::text[])[i] OR reserved_until <= $2) \
    AND (NOT fanout_distinct OR NOT EXISTS (SELECT 1 FROM tasks c \
        WHERE c.fanout_group = tasks.fanout_group AND c.leased_by = ($7::text[])[i] \
          AND c.state IN ('leased', 'succeeded'))))";

/// Leases each worker of the batch holds in each queue where its request
/// carries a per-worker cap (routing).
async fn held_by_workers(
    tx: &mut Tx<'_>,
    ps: &[LeaseParams],
) -> StoreResult<HashMap<(String, String), u64>> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for p in ps {
        for (queue, &cap) in &p.routing.max_leases_per_worker {
            if cap > 0 && p.queues.contains(queue) {
                pairs.push((p.worker_id.clone(), queue.clone()));
            }
        }
    }
    if pairs.is_empty() {
        return Ok(HashMap::new());
    }
    pairs.sort_unstable();
    pairs.dedup();
    let (workers, queues): (Vec<String>, Vec<String>) = pairs.into_iter().unzip();
    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT p.w, p.q, (SELECT count(*) FROM tasks WHERE state = 'leased' \
           AND leased_by = p.w AND queue = p.q) FROM UNNEST($1::text[], $2::text[]) AS p(w, q)",
    )
    .bind(&workers)
    .bind(&queues)
    .fetch_all(&mut **tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(w, q, n)| ((w, q), n.max(0) as u64))
        .collect())
}

/// What the gated lease knows of one queue (its row already locked).
async fn load_use(
    tx: &mut Tx<'_>,
    queue: &str,
    config: QueueConfig,
    tokens: f64,
    refilled_at: i64,
    now: i64,
) -> StoreResult<QueueUse> {
    let mut usage = QueueUse {
        tokens: config
            .rate_limit
            .map(|l| l.refill(tokens, refilled_at, now)),
        ..QueueUse::default()
    };
    if config.max_concurrent > 0 {
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM tasks WHERE queue = $1 AND state = 'leased'")
                .bind(queue)
                .fetch_one(&mut **tx)
                .await?;
        usage.leased = n.max(0) as u64;
    }
    if config.max_concurrent_per_key > 0 {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT concurrency_key, count(*) FROM tasks WHERE queue = $1 AND state = 'leased' \
             AND concurrency_key IS NOT NULL GROUP BY concurrency_key",
        )
        .bind(queue)
        .fetch_all(&mut **tx)
        .await?;
        usage.leased_per_key = rows
            .into_iter()
            .map(|(k, n)| (k, n.max(0) as u64))
            .collect();
    }
    usage.config = config;
    Ok(usage)
}

/// Loads the per-key buckets of `keys` not loaded yet (refilled to `now`).
async fn load_key_tokens(
    tx: &mut Tx<'_>,
    queue: &str,
    usage: &mut QueueUse,
    keys: &[&str],
    now: i64,
) -> StoreResult<()> {
    let Some(limit) = usage.config.per_key_rate_limit else {
        return Ok(());
    };
    let mut missing: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| !usage.key_tokens.contains_key(*k))
        .collect();
    missing.sort_unstable();
    missing.dedup();
    if missing.is_empty() {
        return Ok(());
    }
    let rows: Vec<(String, f64, i64)> = sqlx::query_as(
        "SELECT key, tokens, refilled_at FROM queue_key_tokens WHERE queue = $1 \
         AND key = ANY($2::text[])",
    )
    .bind(queue)
    .bind(&missing)
    .fetch_all(&mut **tx)
    .await?;
    for (k, t, at) in rows {
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

/// The candidate scan: READY tasks of the queue in effective lease order that
/// some request of the batch may take, leaving out closed keys and tasks
/// offered already, each with the requests that may take it.
#[allow(clippy::too_many_arguments)]
async fn candidates(
    tx: &mut Tx<'_>,
    queue: &str,
    qi: usize,
    config: &QueueConfig,
    closed: &[&String],
    seen: &[i64],
    limit: usize,
    now: i64,
    batch: &Batch,
    ids: &mut HashMap<i64, String>,
) -> StoreResult<Vec<Offer>> {
    let aging = config.aging_ms().unwrap_or(0);
    let round_robin = config.fairness == Fairness::RoundRobinKeys;
    // Round robin: a key's n-th READY task takes its turn in the n-th round, and
    // within a round the key served longest ago (`queue_key_turns`, kept across
    // leases and replicas) goes first. `turn` is the task's place in that order.
    let (last, krn, turn) = if round_robin {
        (
            "COALESCE((SELECT k.served FROM queue_key_turns k WHERE k.queue = $1 \
             AND k.key = COALESCE(tasks.concurrency_key, '')), 0)",
            "row_number() OVER (PARTITION BY COALESCE(concurrency_key, ''), eff \
             ORDER BY deadline ASC NULLS LAST, run_at, seq)",
            "row_number() OVER (PARTITION BY eff \
             ORDER BY krn, last, deadline ASC NULLS LAST, run_at, seq)",
        )
    } else {
        ("0::bigint", "1::bigint", "1::bigint")
    };
    let eff = if aging > 0 {
        "priority + GREATEST($2 - run_at, 0) / $6"
    } else {
        "priority + 0 * $6"
    };
    // Without aging or fairness the index order is the lease order: read only the
    // first rows. With them, every READY row of the queue is ranked.
    let cap = if aging == 0 && !round_robin {
        " ORDER BY priority DESC, deadline ASC NULLS LAST, run_at, seq LIMIT $5"
    } else {
        ""
    };
    let sql = format!(
        "SELECT id, seq, concurrency_key, eff, turn, COALESCE(deadline, 9223372036854775807) AS dl, \
           run_at, size, elig, fgroup FROM (SELECT id, seq, concurrency_key, deadline, run_at, eff, \
           size, elig, fgroup, {turn} AS turn FROM (SELECT id, seq, concurrency_key, deadline, run_at, \
           eff, size, elig, fgroup, last, {krn} AS krn FROM (SELECT id, seq, concurrency_key, deadline, \
             run_at, {eff} AS eff, {last} AS last, \
             {size}::bigint AS size, \
             CASE WHEN {open} THEN NULL ELSE ARRAY(SELECT i - 1 \
               FROM generate_subscripts($7::text[], 1) AS i WHERE {may_take} ORDER BY i) END AS elig, \
             CASE WHEN fanout_distinct THEN fanout_group END AS fgroup \
             FROM tasks WHERE state = 'pending' AND NOT waiting AND queue = $1 AND run_at <= $2 \
             AND COALESCE(deadline, 9223372036854775807) > $2 \
             AND (concurrency_key IS NULL \
               OR concurrency_key NOT IN (SELECT unnest($3::text[]))) \
             AND seq NOT IN (SELECT unnest($4::bigint[])) \
             AND ({open} OR EXISTS (SELECT 1 FROM generate_subscripts($7::text[], 1) AS i \
               WHERE {may_take})){cap}) a) k) b \
         ORDER BY eff DESC, turn, deadline ASC NULLS LAST, run_at, seq LIMIT $5",
        size = crate::store::reply::size_sql(crate::store::reply::Dialect::Postgres),
        open = GATED_OPEN,
        may_take = GATED_MAY_TAKE,
    );
    // Built from constant fragments only; every value is bound.
    let rows: Vec<CandidateRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(queue)
        .bind(now)
        .bind(closed)
        .bind(seen)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(aging)
        .bind(&batch.workers)
        .bind(&batch.labels)
        .fetch_all(&mut **tx)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(id, seq, key, eff, turn, dl, run_at, size, elig, group)| {
            ids.insert(seq, id);
            Offer {
                cand: Candidate {
                    seq,
                    key,
                    order: (eff, turn, dl, run_at, seq),
                    size,
                },
                queue: qi,
                elig: elig.map(|e| {
                    e.into_iter()
                        .filter_map(|i| usize::try_from(i).ok())
                        .collect()
                }),
                group,
            }
        })
        .collect())
}

/// The buckets a gated lease charges, as the lease statement binds them: each
/// rate-limited queue with its tokens before, and each key of a task granted in
/// a queue with a per-key rate limit with its tokens before (an absent bucket
/// is full). The statement takes one token per lease it writes.
struct Buckets {
    queues: Vec<String>,
    tokens: Vec<f64>,
    key_queues: Vec<String>,
    keys: Vec<String>,
    key_tokens: Vec<f64>,
}

impl Buckets {
    fn new(queues: &[String], uses: &[QueueUse], granted: &[Assigned]) -> Self {
        let mut b = Buckets {
            queues: Vec::new(),
            tokens: Vec::new(),
            key_queues: Vec::new(),
            keys: Vec::new(),
            key_tokens: Vec::new(),
        };
        for (qi, (queue, usage)) in queues.iter().zip(uses).enumerate() {
            if let Some(t) = usage.tokens {
                b.queues.push(queue.clone());
                b.tokens.push(t);
            }
            let Some(limit) = usage.config.per_key_rate_limit else {
                continue;
            };
            let mut keys: Vec<&str> = granted
                .iter()
                .filter(|a| a.queue == qi)
                .filter_map(|a| a.cand.key.as_deref())
                .collect();
            keys.sort_unstable();
            keys.dedup();
            for k in keys {
                b.key_queues.push(queue.clone());
                b.keys.push(k.to_string());
                b.key_tokens.push(
                    usage
                        .key_tokens
                        .get(k)
                        .copied()
                        .unwrap_or_else(|| limit.capacity()),
                );
            }
        }
        b
    }
}
