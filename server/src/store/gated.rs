//! The gated lease's passes, written once for every database: each pass reads
//! a window of candidates per open queue (each backend's own read, through
//! [`GatedRead`]), loads the buckets of their keys and lets the [`Plan`] walk
//! them in lease order; a pass more only when keys closed along the way or a
//! queue's window was full. What a backend locks first, and how it writes the
//! grants, stays its own (`<backend>/gated.rs`).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::task::{Context, Poll, Waker};

use super::admission::{MAX_PASSES, Offer, Plan, SortKey, window};
use super::limits::{LimitRead, Limits};
use super::{LeaseParams, StoreError, StoreResult};
use crate::domain::admission::{Fairness, QueueConfig, QueueUse, Served, served_order};

/// A database's reads for the gated passes, in the transaction (or the
/// writer's batch) of the lease.
pub(crate) trait GatedRead {
    /// Up to `limit` READY tasks of queue `qi` in effective lease order that
    /// some request of the batch may take, leaving out the `closed` keys and
    /// the tasks `seen` (offered already), each with the requests that may
    /// take it.
    async fn candidates(
        &mut self,
        qi: usize,
        config: &QueueConfig,
        closed: &HashSet<String>,
        seen: &[i64],
        limit: usize,
    ) -> StoreResult<Vec<Offer>>;

    /// The stored buckets `(key, tokens, refilled_at)` of these keys of queue
    /// `qi` (distinct, sorted); a key without a row has a full bucket.
    async fn key_buckets(
        &mut self,
        qi: usize,
        keys: &[&str],
    ) -> StoreResult<Vec<(String, f64, i64)>>;

    /// The leases held in queue `qi`.
    async fn leased(&mut self, qi: usize) -> StoreResult<i64>;

    /// The leases held in queue `qi`, by concurrency key.
    async fn leased_per_key(&mut self, qi: usize) -> StoreResult<Vec<(String, i64)>>;
}

/// Runs the passes of a gated lease: offers the candidates `read` reads to
/// `plan`, pass by pass, until the batch wants nothing more, every queue is
/// read to its end or closed, or [`MAX_PASSES`] have run. `uses` gain the
/// buckets of the keys read; the plan holds the grants.
pub(crate) async fn passes(
    read: &mut (impl GatedRead + LimitRead),
    plan: &mut Plan<'_>,
    uses: &mut [QueueUse],
    limits: &Limits,
    now: i64,
) -> StoreResult<()> {
    let n = uses.len();
    plan.set_bucket_budgets(limits.budgets());
    // Keys in a cooldown are closed as full keys are: left out of the scan.
    let mut closed: Vec<HashSet<String>> = uses
        .iter()
        .enumerate()
        .map(|(qi, u)| {
            let mut c: HashSet<String> = u.closed_keys().into_iter().collect();
            if let Some(cooled) = limits.cooled_keys.get(qi) {
                c.extend(cooled.iter().cloned());
            }
            c
        })
        .collect();
    let mut seen: Vec<Vec<i64>> = vec![Vec::new(); n];
    let mut done = vec![false; n];
    for _ in 0..MAX_PASSES {
        if plan.wanted() == 0 {
            break;
        }
        let window = window(plan.wanted());
        let mut offers = Vec::new();
        let mut horizon: Option<SortKey> = None;
        for qi in 0..n {
            if done[qi] || !plan.open(qi) {
                continue;
            }
            let cands = read
                .candidates(qi, &uses[qi].config, &closed[qi], &seen[qi], window)
                .await?;
            let keys: Vec<&str> = cands.iter().filter_map(|o| o.cand.key.as_deref()).collect();
            load_key_buckets(read, qi, &mut uses[qi], keys, now).await?;
            if limits.any_bucket() && !cands.is_empty() {
                let seqs: Vec<i64> = cands.iter().map(|o| o.cand.seq).collect();
                plan.note_buckets(read.limit_candidate_buckets(&seqs).await?);
            }
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
        plan.walk(offers, horizon, uses, &mut seen, &mut closed);
        if done.iter().all(|d| *d) {
            break;
        }
    }
    Ok(())
}

/// Loads the per-key buckets of `keys` not loaded yet (refilled to `now`),
/// where the queue has a per-key rate limit.
async fn load_key_buckets(
    read: &mut impl GatedRead,
    qi: usize,
    usage: &mut QueueUse,
    mut keys: Vec<&str>,
    now: i64,
) -> StoreResult<()> {
    let Some(limit) = usage.config.per_key_rate_limit else {
        return Ok(());
    };
    keys.retain(|k| !usage.key_tokens.contains_key(*k));
    keys.sort_unstable();
    keys.dedup();
    if keys.is_empty() {
        return Ok(());
    }
    for (k, t, at) in read.key_buckets(qi, &keys).await? {
        usage.key_tokens.insert(k, limit.refill(t, at, now));
    }
    for k in keys {
        usage
            .key_tokens
            .entry(k.to_string())
            .or_insert_with(|| limit.capacity());
    }
    Ok(())
}

/// What the gated lease knows of queue `qi` from its stored row (settings,
/// bucket as read): the bucket refilled to `now`, and its leases counted where
/// a concurrency cap (the queue's, each key's) needs them.
pub(crate) async fn load_use(
    read: &mut impl GatedRead,
    qi: usize,
    config: QueueConfig,
    (tokens, refilled_at): (f64, i64),
    now: i64,
) -> StoreResult<QueueUse> {
    let mut usage = QueueUse {
        tokens: config
            .rate_limit
            .map(|l| l.refill(tokens, refilled_at, now)),
        ..QueueUse::default()
    };
    if config.max_concurrent > 0 {
        usage.leased = read.leased(qi).await?.max(0) as u64;
    }
    if config.max_concurrent_per_key > 0 {
        usage.leased_per_key = read
            .leased_per_key(qi)
            .await?
            .into_iter()
            .map(|(k, n)| (k, n.max(0) as u64))
            .collect();
    }
    usage.config = config;
    Ok(usage)
}

/// The (worker, queue) pairs of the batch whose leases count against a
/// per-worker cap (routing), distinct and sorted.
pub(crate) fn capped_pairs(ps: &[LeaseParams]) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for p in ps {
        for (queue, &cap) in &p.routing.max_leases_per_worker {
            if cap > 0 && p.queues.contains(queue) {
                pairs.push((p.worker_id.clone(), queue.clone()));
            }
        }
    }
    pairs.sort_unstable();
    pairs.dedup();
    pairs
}

/// The leases held, by (worker, queue), as [`Plan::new`] asks for them.
pub(crate) fn held_lookup(
    held: &HashMap<(String, String), u64>,
) -> impl Fn(&str, &str) -> u64 + '_ {
    |w, q| {
        held.get(&(w.to_string(), q.to_string()))
            .copied()
            .unwrap_or(0)
    }
}

/// Runs to its end a future that never waits: the gated passes over SQLite's
/// reads, which are calls on the writer's own connection, not I/O.
pub(crate) fn run_ready<T>(fut: impl Future<Output = StoreResult<T>>) -> StoreResult<T> {
    let mut fut = std::pin::pin!(fut);
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(r) => r,
        Poll::Pending => Err(StoreError::Internal(
            "a read of the writer's batch waited".into(),
        )),
    }
}

/// Round robin: the keys each round-robin queue served in a gated lease's
/// grants (`charged`: each grant's queue and key, in the order granted), for
/// the backend to record so the next lease (of any replica, any size) starts
/// with the keys served longest ago: per queue, its name and what
/// [`served_order`] makes of its keys.
pub(crate) fn served<'a>(
    queues: &'a [String],
    uses: &[QueueUse],
    charged: &[(usize, Option<String>)],
) -> Vec<(&'a str, Served)> {
    let mut out = Vec::new();
    for (qi, queue) in queues.iter().enumerate() {
        if uses[qi].config.fairness != Fairness::RoundRobinKeys {
            continue;
        }
        let keys: Vec<&str> = charged
            .iter()
            .filter(|(q, _)| *q == qi)
            .map(|(_, k)| k.as_deref().unwrap_or(""))
            .collect();
        if let Some(order) = served_order(&keys) {
            out.push((queue.as_str(), order));
        }
    }
    out
}

/// The buckets a gated lease's grants charge, one token per lease granted:
/// each rate-limited queue's tokens after, `(queue, tokens)`, and each key's in
/// a queue with a per-key rate limit, `(queue, key, tokens)` (an absent bucket
/// was full).
pub(crate) struct Charges<'a> {
    pub queues: Vec<(&'a str, f64)>,
    pub keys: Vec<(&'a str, &'a str, f64)>,
}

pub(crate) fn charges<'a>(
    queues: &'a [String],
    uses: &[QueueUse],
    charged: &'a [(usize, Option<String>)],
) -> Charges<'a> {
    let mut out = Charges {
        queues: Vec::new(),
        keys: Vec::new(),
    };
    for (qi, queue) in queues.iter().enumerate() {
        let usage = &uses[qi];
        let granted = charged.iter().filter(|(q, _)| *q == qi);
        if let Some(t) = usage.tokens {
            out.queues.push((queue, t - granted.clone().count() as f64));
        }
        if let Some(limit) = usage.config.per_key_rate_limit {
            let mut per_key: HashMap<&str, f64> = HashMap::new();
            for k in granted.filter_map(|(_, k)| k.as_deref()) {
                *per_key.entry(k).or_default() += 1.0;
            }
            for (k, n) in per_key {
                let before = usage
                    .key_tokens
                    .get(k)
                    .copied()
                    .unwrap_or_else(|| limit.capacity());
                out.keys.push((queue, k, before - n));
            }
        }
    }
    out
}
