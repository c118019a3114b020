//! The gated lease on SQLite (`Leasing::task_lease_gated`), one writer job: the candidates each request may
//! take, admitted against the queues' and keys' limits and buckets (counted and
//! read in the same batch, so exactly what the next lease sees), then leased and
//! charged.

use std::collections::{HashMap, HashSet};

use rusqlite::{Connection, OptionalExtension, params};

use super::super::admission::{Assigned, MAX_PASSES, Offer, Plan, SortKey, window};
use super::super::row::{TaskRow, duration_ms, ms, sort_lease_order};
use super::super::*;
use super::admission::{json_text, parse};
use super::rows::task_row;
use super::{sql, tx};
use crate::domain::admission::{Candidate, Fairness, QueueConfig, QueueUse};

/// What the gated lease knows of one queue, and its bucket as read.
fn load_use(c: &Connection, queue: &str, now: i64) -> StoreResult<QueueUse> {
    let row: Option<(String, f64, i64)> = c
        .prepare_cached(sql::TASK_LEASE_GATED_QUEUES)?
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
            .prepare_cached(sql::TASK_LEASE_GATED_LEASED)?
            .query_row(params![queue], |r| r.get::<_, i64>(0))?
            .max(0) as u64;
    }
    if config.max_concurrent_per_key > 0 {
        let mut st = c.prepare_cached(sql::TASK_LEASE_GATED_LEASED_PER_KEY)?;
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
    let mut st = c.prepare_cached(sql::TASK_LEASE_GATED_KEY_TOKENS)?;
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

/// The workers of a gated lease batch (routing), per request.
struct Batch {
    /// Their ids, a JSON array.
    workers: String,
    /// Their labels, a JSON array of objects.
    labels: String,
}

/// The candidate scan: READY tasks of the queue in effective lease order that
/// some request of the batch may take, leaving out closed keys and tasks
/// offered already, each with the requests that may take it.
#[allow(clippy::too_many_arguments)]
fn candidates(
    c: &Connection,
    queue: &str,
    qi: usize,
    config: &QueueConfig,
    closed: &HashSet<String>,
    seen: &[i64],
    limit: usize,
    now: i64,
    batch: &Batch,
) -> StoreResult<Vec<Offer>> {
    let aging = config.aging_ms().unwrap_or(0);
    let fair = config.fairness == Fairness::RoundRobinKeys;
    let pick = match (fair, aging > 0) {
        (false, false) => sql::TASK_LEASE_GATED_CANDIDATES,
        (false, true) => sql::TASK_LEASE_GATED_CANDIDATES_AGING,
        (true, false) => sql::TASK_LEASE_GATED_CANDIDATES_ROUND_ROBIN,
        (true, true) => sql::TASK_LEASE_GATED_CANDIDATES_AGING_ROUND_ROBIN,
    };
    let closed = json_text(closed)?;
    let seen = json_text(seen)?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut st = c.prepare_cached(pick)?;
    let rows = st.query_map(
        params![
            queue,
            now,
            closed,
            seen,
            limit,
            aging,
            batch.workers,
            batch.labels
        ],
        |r| {
            Ok((
                Candidate {
                    seq: r.get(0)?,
                    key: r.get(1)?,
                    order: (r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(0)?),
                    size: r.get(6)?,
                },
                r.get::<_, Option<String>>(7)?,
                r.get::<_, Option<String>>(8)?,
            ))
        },
    )?;
    let mut out = Vec::new();
    for row in rows {
        let (cand, elig, group) = row?;
        let elig = match elig {
            Some(json) => {
                let mut e: Vec<usize> = serde_json::from_str(&json)
                    .map_err(|e| StoreError::Corrupt(format!("lease eligibility: {e}")))?;
                e.sort_unstable();
                Some(e)
            }
            None => None,
        };
        out.push(Offer {
            cand,
            queue: qi,
            elig,
            group,
        });
    }
    Ok(out)
}

/// The leases a worker holds in `queue`.
fn held(c: &Connection, worker: &str, queue: &str) -> StoreResult<u64> {
    let n: i64 = c
        .prepare_cached(sql::TASK_LEASE_GATED_HELD)?
        .query_row(params![queue, worker], |r| r.get(0))?;
    Ok(n.max(0) as u64)
}

/// The gated lease of a batch of requests for the same queues, served together:
/// one count of the leases held, one candidate scan (more only when keys close
/// along the way), one UPDATE per task granted and one read of the granted rows
/// ([`grant`]), all in the writer's batch.
/// Routing: each candidate row comes with the requests whose workers
/// may take it (`elig`); [`Plan`] hands the rows out in lease order within the
/// gates, the caps and the reply budgets.
pub(super) fn lease_gated(c: &Connection, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>> {
    let Some(first) = ps.first() else {
        return Ok(Vec::new());
    };
    let queues = &first.queues;
    let now = ms(ps.iter().map(|p| p.now).max().unwrap_or(first.now));
    let workers: Vec<&str> = ps.iter().map(|p| p.worker_id.as_str()).collect();
    let labels: Vec<_> = ps.iter().map(|p| &p.routing.labels).collect();
    let batch = Batch {
        workers: json_text(&workers)?,
        labels: json_text(&labels)?,
    };
    super::rows::promote(c, queues, now)?;
    let mut uses = Vec::with_capacity(queues.len());
    for queue in queues {
        uses.push(load_use(c, queue, now)?);
    }
    // The per-worker caps (routing): what each worker holds counts.
    let mut holds: HashMap<(String, String), u64> = HashMap::new();
    for p in ps {
        for (queue, &cap) in &p.routing.max_leases_per_worker {
            let pair = (p.worker_id.clone(), queue.clone());
            if cap > 0 && queues.contains(queue) && !holds.contains_key(&pair) {
                let n = held(c, &p.worker_id, queue)?;
                holds.insert(pair, n);
            }
        }
    }
    let mut plan = Plan::new(ps, &uses, |w, q| {
        holds
            .get(&(w.to_string(), q.to_string()))
            .copied()
            .unwrap_or(0)
    });
    let mut closed: Vec<HashSet<String>> = uses
        .iter()
        .map(|u| u.closed_keys().into_iter().collect())
        .collect();
    let mut seen: Vec<Vec<i64>> = vec![Vec::new(); queues.len()];
    let mut done = vec![false; queues.len()];
    for _ in 0..MAX_PASSES {
        if plan.wanted() == 0 {
            break;
        }
        let window = window(plan.wanted());
        let mut offers = Vec::new();
        let mut horizon: Option<SortKey> = None;
        for (qi, queue) in queues.iter().enumerate() {
            if done[qi] || !plan.open(qi) {
                continue;
            }
            let cands = candidates(
                c,
                queue,
                qi,
                &uses[qi].config,
                &closed[qi],
                &seen[qi],
                window,
                now,
                &batch,
            )?;
            let keys: Vec<&str> = cands.iter().filter_map(|o| o.cand.key.as_deref()).collect();
            load_key_tokens(c, queue, &mut uses[qi], &keys, now)?;
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
    let taken = plan.into_taken();
    let granted = grant(c, ps, &taken, now)?;
    let mut out: Vec<Vec<TaskRecord>> = ps.iter().map(|_| Vec::new()).collect();
    let mut charged: Vec<(usize, Option<String>)> = Vec::with_capacity(granted.len());
    for (Assigned { queue, request, .. }, row) in taken.iter().zip(granted) {
        let Some(row) = row else { continue };
        // Flow: the LEASED event.
        tx::push(super::super::flow::of_row(
            &row,
            crate::domain::event::EventKind::Leased,
            now,
        ));
        charged.push((*queue, row.concurrency_key.clone()));
        out[*request].push(row.into_record()?);
    }
    charge(c, queues, &uses, &charged, now)?;
    turns(c, queues, &uses, &charged)?;
    // Round robin: each reply in turn order (the order granted).
    if !uses
        .iter()
        .any(|u| u.config.fairness == Fairness::RoundRobinKeys)
    {
        for records in &mut out {
            sort_lease_order(records);
        }
    }
    Ok(out)
}

/// Round robin: records the keys served, in the order granted, so the next
/// lease (of any replica, any size) starts with the keys served longest ago.
/// Each grant of a round-robin queue takes the next number of the queue's
/// counter; a key keeps the number of its latest grant.
fn turns(
    c: &Connection,
    queues: &[String],
    uses: &[QueueUse],
    charged: &[(usize, Option<String>)],
) -> StoreResult<()> {
    for (qi, queue) in queues.iter().enumerate() {
        if uses[qi].config.fairness != Fairness::RoundRobinKeys {
            continue;
        }
        let keys: Vec<&str> = charged
            .iter()
            .filter(|(q, _)| *q == qi)
            .map(|(_, k)| k.as_deref().unwrap_or(""))
            .collect();
        let Some(order) = crate::domain::admission::served_order(&keys) else {
            continue;
        };
        let counter: i64 = c
            .prepare_cached(sql::TASK_LEASE_GATED_TURNS_COUNTER)?
            .query_row(params![queue], |r| r.get(0))
            .optional()?
            .unwrap_or(0);
        let mut put = c.prepare_cached(sql::TASK_LEASE_GATED_TURNS_PUT)?;
        for (key, at) in &order.last {
            put.execute(params![queue, key, counter + at])?;
        }
        c.prepare_cached(sql::TASK_LEASE_GATED_TURNS_SERVED)?
            .execute(params![queue, counter + order.count])?;
    }
    Ok(())
}

/// Writes the leases of the tasks granted (in `taken` order) and reads them
/// back: `None` for a task no longer pending (none, as the writer is the only
/// writer, but the row decides).
///
/// One single-row UPDATE per task without RETURNING, then one SELECT of every
/// granted row: SQLite runs an UPDATE that may change several rows, or has a
/// RETURNING clause (an implicit trigger), inside a statement journal, and closing
/// that journal inside the writer's job savepoint walks the job's in-memory
/// sub-journal from its start (`temp_store = MEMORY`): per task, that walk was a
/// third of the writer's time in a gated batch. A single-row UPDATE by rowid
/// needs no statement journal.
fn grant(
    c: &Connection,
    ps: &[LeaseParams],
    taken: &[Assigned],
    now: i64,
) -> StoreResult<Vec<Option<TaskRow>>> {
    if taken.is_empty() {
        return Ok(Vec::new());
    }
    let mut update = c.prepare_cached(sql::LEASE_PLAIN_WRITE)?;
    let mut leased: Vec<i64> = Vec::with_capacity(taken.len());
    for a in taken {
        let p = &ps[a.request];
        let lease_ms = duration_ms(p.lease_duration);
        let n = update.execute(params![
            p.worker_id,
            lease_ms,
            now.saturating_add(lease_ms),
            now,
            p.worker_address,
            a.cand.seq
        ])?;
        if n == 1 {
            leased.push(a.cand.seq);
        }
    }
    let mut rows: HashMap<i64, TaskRow> = c
        .prepare_cached(sql::TASK_LEASE_GATED_READ)?
        .query_map(params![json_text(&leased)?], task_row)?
        .map(|r| r.map(|row| (row.seq, row)))
        .collect::<rusqlite::Result<_>>()?;
    Ok(taken.iter().map(|a| rows.remove(&a.cand.seq)).collect())
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
            c.prepare_cached(sql::TASK_LEASE_GATED_CHARGE)?
                .execute(params![queue, t - n, now])?;
        }
        if let Some(limit) = usage.config.per_key_rate_limit {
            let mut per_key: HashMap<&str, f64> = HashMap::new();
            for (_, k) in granted {
                if let Some(k) = k {
                    *per_key.entry(k).or_default() += 1.0;
                }
            }
            let mut put = c.prepare_cached(sql::TASK_LEASE_GATED_CHARGE_KEY)?;
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
