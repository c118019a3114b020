//! The gated lease on Postgres (`Leasing::task_lease_gated`): under the locks of its gated queues' rows, the
//! candidates each request may take, admitted against the queues' and keys'
//! limits and buckets, then leased (see `admission.rs` for how the limits hold
//! for the whole cluster).

use std::collections::{HashMap, HashSet};

use sqlx::{Postgres, Transaction};

use super::super::admission::{Assigned, Offer, Plan};
use super::super::gated::{self, GatedRead};
use super::super::limits;
use super::super::limits::{LimitRead, Limits, bucket_charges};
use super::super::row::{TaskRow, duration_ms, ms};
use super::super::*;
use super::admission::parse;
use super::rows::{by_request, leased_row};
use super::{PostgresStore, sql};
use crate::domain::admission::{Candidate, Fairness, QueueConfig, QueueUse};

pub(super) type Tx<'a> = Transaction<'a, Postgres>;

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
    pub(super) async fn lease_gated(
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
        let rows: Vec<(String, String, f64, i64)> = sqlx::query_as(sql::TASK_LEASE_GATED_QUEUES)
            .bind(&sorted)
            .fetch_all(&mut *tx)
            .await?;
        let stored: HashMap<String, (String, f64, i64)> = rows
            .into_iter()
            .map(|(n, c, t, r)| (n, (c, t, r)))
            .collect();
        let mut read = Reads {
            tx: &mut tx,
            queues,
            now,
            batch: &batch,
            ids: HashMap::new(),
        };
        let mut uses = Vec::with_capacity(queues.len());
        for (qi, queue) in queues.iter().enumerate() {
            uses.push(match stored.get(queue) {
                Some((json, tokens, refilled_at)) => {
                    let config = parse(queue, json)?;
                    gated::load_use(&mut read, qi, config, (*tokens, *refilled_at), now).await?
                }
                None => QueueUse::default(),
            });
        }
        // Limit buckets (their rows locked after the queues') and cooldowns.
        let limits = limits::load(&mut read, queues, &uses, now).await?;
        let workers: Vec<&str> = batch.workers.iter().map(String::as_str).collect();
        super::leasing::lock_workers(read.tx, &workers).await?;
        let held = held_by_workers(read.tx, ps).await?;
        let mut plan = Plan::new(ps, &uses, gated::held_lookup(&held));
        gated::passes(&mut read, &mut plan, &mut uses, &limits, now).await?;
        let ids = read.ids;
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
        let rows: Vec<(TaskRow, i64)> = sqlx::query(sql::TASK_LEASE_GATED_WRITE)
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
            .try_map(leased_row)
            .fetch_all(&mut *tx)
            .await?;
        // The buckets of the rows written, one token each.
        let written: HashSet<i64> = rows.iter().map(|(r, _)| r.seq).collect();
        let bucketed = assigned
            .iter()
            .filter(|a| written.contains(&a.cand.seq))
            .filter_map(|a| a.bucket.as_deref());
        charge_buckets(&mut tx, &limits, bucketed, now).await?;
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
        // Round robin: each reply in turn order (the order granted).
        by_request(ps.len(), rows, !fair)
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
        sqlx::query(sql::TASK_LEASE_GATED_TURNS)
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

/// Leases each worker of the batch holds in each queue where its request
/// carries a per-worker cap (routing).
async fn held_by_workers(
    tx: &mut Tx<'_>,
    ps: &[LeaseParams],
) -> StoreResult<HashMap<(String, String), u64>> {
    let pairs = gated::capped_pairs(ps);
    if pairs.is_empty() {
        return Ok(HashMap::new());
    }
    let (workers, queues): (Vec<String>, Vec<String>) = pairs.into_iter().unzip();
    let rows: Vec<(String, String, i64)> = sqlx::query_as(sql::TASK_LEASE_GATED_HELD)
        .bind(&workers)
        .bind(&queues)
        .fetch_all(&mut **tx)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(w, q, n)| ((w, q), n.max(0) as u64))
        .collect())
}

/// The gated passes' reads, in the lease's transaction (the queue rows
/// already locked), and the candidates' ids by seq (the UPDATE finds its rows
/// by id).
pub(super) struct Reads<'t, 'c, 'p> {
    pub(super) tx: &'t mut Tx<'c>,
    pub(super) queues: &'p [String],
    now: i64,
    batch: &'p Batch,
    ids: HashMap<i64, String>,
}

impl GatedRead for Reads<'_, '_, '_> {
    /// The candidate scan: READY tasks of the queue in effective lease order that
    /// some request of the batch may take, leaving out closed keys and tasks
    /// offered already, each with the requests that may take it.
    async fn candidates(
        &mut self,
        qi: usize,
        config: &QueueConfig,
        closed: &HashSet<String>,
        seen: &[i64],
        limit: usize,
    ) -> StoreResult<Vec<Offer>> {
        let (queues, now, batch) = (self.queues, self.now, self.batch);
        let queue = &queues[qi];
        let closed: Vec<&String> = closed.iter().collect();
        let aging = config.aging_ms().unwrap_or(0);
        let round_robin = config.fairness == Fairness::RoundRobinKeys;
        // Without aging or fairness the index order is the lease order: only the
        // first rows are self. With them, every READY row of the queue is ranked
        // (see gated.sql).
        let sql = match (aging > 0, round_robin) {
            (false, false) => sql::TASK_LEASE_GATED_CANDIDATES,
            (true, false) => sql::TASK_LEASE_GATED_CANDIDATES_AGING,
            (false, true) => sql::TASK_LEASE_GATED_CANDIDATES_ROUND_ROBIN,
            (true, true) => sql::TASK_LEASE_GATED_CANDIDATES_AGING_ROUND_ROBIN,
        };
        let rows: Vec<CandidateRow> = sqlx::query_as(sql)
            .bind(queue)
            .bind(now)
            .bind(&closed)
            .bind(seen)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(aging)
            .bind(&batch.workers)
            .bind(&batch.labels)
            .fetch_all(&mut **self.tx)
            .await?;
        let ids = &mut self.ids;
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

    async fn key_buckets(
        &mut self,
        qi: usize,
        keys: &[&str],
    ) -> StoreResult<Vec<(String, f64, i64)>> {
        Ok(sqlx::query_as(sql::TASK_LEASE_GATED_KEY_TOKENS)
            .bind(&self.queues[qi])
            .bind(keys)
            .fetch_all(&mut **self.tx)
            .await?)
    }

    async fn leased(&mut self, qi: usize) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(sql::TASK_LEASE_GATED_LEASED)
            .bind(&self.queues[qi])
            .fetch_one(&mut **self.tx)
            .await?)
    }

    async fn leased_per_key(&mut self, qi: usize) -> StoreResult<Vec<(String, i64)>> {
        Ok(sqlx::query_as(sql::TASK_LEASE_GATED_LEASED_PER_KEY)
            .bind(&self.queues[qi])
            .fetch_all(&mut **self.tx)
            .await?)
    }
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

/// Whether the lease statements cut their replies by store/reply.rs's bound
/// (their fragments in leasing.sql and gated.sql spell it out); checked when
/// the store opens, in debug builds, and by a unit test.
pub(super) fn cuts_by_reply_bound() -> bool {
    let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let size = words(&crate::store::reply::size_sql(
        crate::store::reply::Dialect::Postgres,
    ));
    let fields = words(crate::store::reply::size_of_fields!());
    [
        sql::TASK_LEASE_GATED_CANDIDATES,
        sql::TASK_LEASE_GATED_CANDIDATES_AGING,
        sql::TASK_LEASE_GATED_CANDIDATES_ROUND_ROBIN,
        sql::TASK_LEASE_GATED_CANDIDATES_AGING_ROUND_ROBIN,
    ]
    .iter()
    .all(|s| words(s).contains(&size))
        && [sql::TASK_LEASE_MANY_PLAIN, sql::TASK_LEASE_MANY_ROUTED]
            .iter()
            .all(|s| words(s).contains(&fields))
}

// The limits of the gated lease on Postgres (`LimitRead`): cooldowns and bucket rows
// read in the lease's transaction, bucket rows locked (`FOR UPDATE`) after the queue rows, and
// the bucket charges written in it.

impl LimitRead for Reads<'_, '_, '_> {
    async fn limit_cooldowns(
        &mut self,
        now: i64,
    ) -> StoreResult<Vec<(String, String, String, i64)>> {
        Ok(sqlx::query_as(sql::LEASE_LIMITS_COOLDOWNS)
            .bind(now)
            .fetch_all(&mut **self.tx)
            .await?)
    }

    async fn limit_bucket_names(&mut self, qi: usize) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(sql::LEASE_LIMITS_BUCKET_NAMES)
            .bind(&self.queues[qi])
            .fetch_all(&mut **self.tx)
            .await?)
    }

    async fn limit_bucket(&mut self, name: &str) -> StoreResult<Option<(String, f64, i64)>> {
        Ok(sqlx::query_as(sql::LEASE_LIMITS_BUCKET)
            .bind(name)
            .fetch_optional(&mut **self.tx)
            .await?)
    }

    async fn limit_bucket_leased(&mut self, name: &str) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(sql::BUCKET_LEASED)
            .bind(name)
            .fetch_one(&mut **self.tx)
            .await?)
    }

    async fn limit_candidate_buckets(&mut self, seqs: &[i64]) -> StoreResult<Vec<(i64, String)>> {
        Ok(sqlx::query_as(sql::LEASE_LIMITS_CANDIDATE_BUCKETS)
            .bind(seqs)
            .fetch_all(&mut **self.tx)
            .await?)
    }
}

/// Takes one token per lease granted from each rate-limited bucket charged.
async fn charge_buckets<'a>(
    tx: &mut Tx<'_>,
    limits: &'a Limits,
    granted: impl Iterator<Item = &'a str>,
    now: i64,
) -> StoreResult<()> {
    for (name, tokens) in bucket_charges(limits, granted) {
        sqlx::query(sql::LEASE_LIMITS_CHARGE)
            .bind(tokens)
            .bind(now)
            .bind(name)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_lease_statements_cut_by_the_reply_bound() {
        assert!(super::cuts_by_reply_bound());
    }
}
