//! The gated lease on MySQL (admission gates: concurrency caps, rate limits,
//! fairness), which `Leasing::task_lease_gated` calls.
//!
//! It locks the workers' rows (`routing.rs`), then the `queues` rows of its
//! gated queues (in name order), so the leases counted and the tokens read are
//! exactly what the next gated lease of any replica sees; its candidates are
//! ranked by SQL (window functions) and admitted by [`Plan`].

use std::collections::{HashMap, HashSet};

use super::super::admission::{Assigned, Offer, Plan};
use super::super::flow::of_row;
use super::super::gated::{self, GatedRead};
use super::super::limits;
use super::super::limits::{LimitRead, Limits, bucket_charges};
use super::super::row::IntoRecord;
use super::super::row::{TaskRow, duration_ms, ms, sort_lease_order};
use super::super::*;
use super::routing::{holds_copy, lock_workers, worker_held};
use super::rows::lease_seqs;
use super::{Job, marks, sql};
use crate::domain::admission::{Candidate, Fairness, QueueConfig, QueueUse};
use crate::domain::event::EventKind;

/// What the gated lease knows of one queue, and its bucket as read; its
/// `queues` row stays locked until the job ends.
async fn load_use(read: &mut Reads<'_, '_>, qi: usize) -> StoreResult<QueueUse> {
    let queues = read.queues;
    let queue = &queues[qi];
    let row: Option<(String, f64, i64)> = sqlx::query_as(sql::TASK_LEASE_GATED_QUEUES)
        .bind(queue)
        .fetch_optional(read.j.conn())
        .await?;
    let Some((json, tokens, refilled_at)) = row else {
        return Ok(QueueUse::default());
    };
    let config = super::admission::parse(queue, &json)?;
    let now = read.now;
    gated::load_use(read, qi, config, (tokens, refilled_at), now).await
}

/// The gated passes' reads, in the lease's job.
pub(super) struct Reads<'j, 'p> {
    pub(super) j: &'j mut Job,
    ps: &'p [LeaseParams],
    pub(super) queues: &'p [String],
    now: i64,
}

impl GatedRead for Reads<'_, '_> {
    /// The candidate scan: READY tasks of the queue in effective lease order,
    /// leaving out closed keys and tasks offered already; routing is decided here
    /// for each request of the batch.
    async fn candidates(
        &mut self,
        qi: usize,
        config: &QueueConfig,
        closed: &HashSet<String>,
        seen: &[i64],
        limit: usize,
    ) -> StoreResult<Vec<Offer>> {
        let (ps, queues, now) = (self.ps, self.queues, self.now);
        let queue = &queues[qi];
        let aging = config.aging_ms().unwrap_or(0);
        // Round robin: a key's n-th READY task takes its turn in the n-th round, and
        // within a round the key served longest ago (`queue_key_turns`) goes first.
        let fair = config.fairness == Fairness::RoundRobinKeys;
        let head = match (fair, aging > 0) {
            (false, false) => sql::TASK_LEASE_GATED_CANDIDATES,
            (true, false) => sql::TASK_LEASE_GATED_CANDIDATES_ROUND_ROBIN,
            (false, true) => sql::TASK_LEASE_GATED_CANDIDATES_AGING,
            (true, true) => sql::TASK_LEASE_GATED_CANDIDATES_AGING_ROUND_ROBIN,
        };
        // Dynamic: the keys closed and the tasks offered already, as lists; the
        // first rows only where the index order is the lease order.
        let mut text = head.to_string();
        if !closed.is_empty() {
            text += &format!(
                " AND (concurrency_key IS NULL OR concurrency_key NOT IN ({}))",
                marks(closed.len())
            );
        }
        if !seen.is_empty() {
            text += &format!(" AND seq NOT IN ({})", marks(seen.len()));
        }
        text += " ";
        text += sql::LEASE_GATED_CANDIDATES_ORDER;
        // Without aging or fairness the index order is the lease order: read only
        // the first rows. With them, every READY row of the queue is ranked.
        if aging == 0 && !fair {
            text += " LIMIT ?";
        }
        text += " ";
        text += sql::LEASE_GATED_CANDIDATES_TAIL;
        let mut q = sqlx::query_as::<_, GatedRow>(sqlx::AssertSqlSafe(text));
        if aging > 0 {
            q = q.bind(now).bind(aging);
        }
        q = q.bind(queue).bind(now).bind(now);
        for k in closed {
            q = q.bind(k.clone());
        }
        for s in seen {
            q = q.bind(*s);
        }
        if aging == 0 && !fair {
            q = q.bind(limit as i64);
        }
        let rows: Vec<GatedRow> = q.bind(limit as i64).fetch_all(self.j.conn()).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let open = r.target_worker.is_none()
                && r.target_labels.is_none()
                && r.reserved_for.is_none()
                && !r.fanout_distinct;
            let elig = if open {
                None
            } else {
                let labels: Option<std::collections::BTreeMap<String, String>> =
                    match &r.target_labels {
                        Some(t) => Some(
                            serde_json::from_str(t)
                                .map_err(|e| StoreError::Corrupt(format!("task labels: {e}")))?,
                        ),
                        None => None,
                    };
                let mut e = Vec::new();
                for (i, p) in ps.iter().enumerate() {
                    let w = p.worker_id.as_str();
                    let ok = r.target_worker.as_deref().is_none_or(|t| t == w)
                        && labels.as_ref().is_none_or(|l| {
                            l.iter()
                                .all(|(k, v)| p.routing.labels.get(k).is_some_and(|x| x == v))
                        })
                        && (r.reserved_for.as_deref().is_none_or(|x| x == w)
                            || r.reserved_until.is_some_and(|u| u <= now));
                    let ok = ok
                        && (!r.fanout_distinct || !holds_copy(self.j, &r.fanout_group, w).await?);
                    if ok {
                        e.push(i);
                    }
                }
                Some(e)
            };
            out.push(Offer {
                cand: Candidate {
                    seq: r.seq,
                    key: r.concurrency_key,
                    order: (r.eff, r.turn, r.lease_deadline, r.run_at, r.seq),
                    size: r.size,
                },
                queue: qi,
                elig,
                group: if r.fanout_distinct {
                    r.fanout_group
                } else {
                    None
                },
            });
        }
        Ok(out)
    }

    async fn key_buckets(
        &mut self,
        qi: usize,
        keys: &[&str],
    ) -> StoreResult<Vec<(String, f64, i64)>> {
        // Dynamic: one placeholder per key.
        let text = format!("{}{})", sql::TASK_LEASE_GATED_KEY_TOKENS, marks(keys.len()));
        let mut q = sqlx::query_as::<_, (String, f64, i64)>(sqlx::AssertSqlSafe(text))
            .bind(&self.queues[qi]);
        for k in keys {
            q = q.bind(*k);
        }
        Ok(q.fetch_all(self.j.conn()).await?)
    }

    async fn leased(&mut self, qi: usize) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(sql::TASK_LEASE_GATED_LEASED)
            .bind(&self.queues[qi])
            .fetch_one(self.j.conn())
            .await?)
    }

    async fn leased_per_key(&mut self, qi: usize) -> StoreResult<Vec<(String, i64)>> {
        Ok(sqlx::query_as(sql::TASK_LEASE_GATED_LEASED_PER_KEY)
            .bind(&self.queues[qi])
            .fetch_all(self.j.conn())
            .await?)
    }
}

/// A candidate row of the gated scan, with its routing columns.
#[derive(sqlx::FromRow)]
struct GatedRow {
    seq: i64,
    concurrency_key: Option<String>,
    eff: i64,
    turn: i64,
    lease_deadline: i64,
    run_at: i64,
    size: i64,
    target_worker: Option<String>,
    target_labels: Option<String>,
    reserved_for: Option<String>,
    reserved_until: Option<i64>,
    fanout_distinct: bool,
    fanout_group: Option<String>,
}

/// The gated lease of a batch of requests for the same queues (see the module
/// docs), as the SQLite store's: one count of the leases held, candidate scans
/// (more only when keys close along the way), then the grants and their charges.
pub(super) async fn lease_gated(
    j: &mut Job,
    ps: &[LeaseParams],
) -> StoreResult<Vec<Vec<TaskRecord>>> {
    let Some(first) = ps.first() else {
        return Ok(Vec::new());
    };
    let queues = &first.queues;
    let now = ms(ps.iter().map(|p| p.now).max().unwrap_or(first.now));
    let workers: Vec<&str> = ps.iter().map(|p| p.worker_id.as_str()).collect();
    lock_workers(j, &workers).await?;
    let mut read = Reads { j, ps, queues, now };
    // Lock the queues' rows in name order (no deadlock between batches).
    let mut order: Vec<usize> = (0..queues.len()).collect();
    order.sort_by(|&a, &b| queues[a].cmp(&queues[b]));
    let mut uses: Vec<Option<QueueUse>> = vec![None; queues.len()];
    for i in order {
        uses[i] = Some(load_use(&mut read, i).await?);
    }
    let mut uses: Vec<QueueUse> = uses.into_iter().map(Option::unwrap_or_default).collect();
    let mut holds: HashMap<(String, String), u64> = HashMap::new();
    for (worker, queue) in gated::capped_pairs(ps) {
        let n = worker_held(read.j, &queue, &worker).await?;
        holds.insert((worker, queue), n.max(0) as u64);
    }
    // Limit buckets (their rows locked after the queues') and cooldowns.
    let limits = limits::load(&mut read, queues, &uses, now).await?;
    let mut plan = Plan::new(ps, &uses, gated::held_lookup(&holds));
    gated::passes(&mut read, &mut plan, &mut uses, &limits, now).await?;
    let taken = plan.into_taken();
    // One UPDATE per request's tasks, then the rows by seq.
    let mut by_seq: HashMap<i64, TaskRow> = HashMap::new();
    for (r, p) in ps.iter().enumerate() {
        let seqs: Vec<i64> = taken
            .iter()
            .filter(|a| a.request == r)
            .map(|a| a.cand.seq)
            .collect();
        let lease_ms = duration_ms(p.lease_duration);
        let saved = std::mem::take(&mut j.events);
        let rows = lease_seqs(j, &seqs, &p.worker_id, &p.worker_address, lease_ms, now).await?;
        // Events in grant order (below), not per request.
        j.events = saved;
        for row in rows {
            by_seq.insert(row.seq, row);
        }
    }
    let mut out: Vec<Vec<TaskRecord>> = ps.iter().map(|_| Vec::new()).collect();
    let mut charged: Vec<(usize, Option<String>)> = Vec::with_capacity(taken.len());
    let mut bucketed: Vec<&str> = Vec::new();
    for Assigned {
        cand,
        queue,
        request,
        bucket,
    } in &taken
    {
        let Some(row) = by_seq.remove(&cand.seq) else {
            continue;
        };
        bucketed.extend(bucket.as_deref());
        j.push(of_row(&row, EventKind::Leased, now));
        charged.push((*queue, row.concurrency_key.clone()));
        out[*request].push(row.into_record()?);
    }
    charge(j, queues, &uses, &charged, now).await?;
    charge_buckets(j, &limits, bucketed.into_iter(), now).await?;
    turns(j, queues, &uses, &charged).await?;
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

/// Round robin: records the keys served, in the order granted
/// ([`gated::served`]). Each grant of a round-robin queue takes the next number
/// of the queue's counter; a key keeps the number of its latest grant.
async fn turns(
    j: &mut Job,
    queues: &[String],
    uses: &[QueueUse],
    charged: &[(usize, Option<String>)],
) -> StoreResult<()> {
    for (queue, order) in gated::served(queues, uses, charged) {
        let counter: i64 = sqlx::query_scalar(sql::TASK_LEASE_GATED_TURNS_COUNTER)
            .bind(queue)
            .fetch_optional(j.conn())
            .await?
            .unwrap_or(0);
        for (key, at) in &order.last {
            sqlx::query(sql::TASK_LEASE_GATED_TURNS_PUT)
                .bind(queue)
                .bind(key)
                .bind(counter + at)
                .execute(j.conn())
                .await?;
        }
        sqlx::query(sql::TASK_LEASE_GATED_TURNS_SERVED)
            .bind(counter + order.count)
            .bind(queue)
            .execute(j.conn())
            .await?;
    }
    Ok(())
}

/// Takes one token per lease granted from the queue's and the key's buckets.
async fn charge(
    j: &mut Job,
    queues: &[String],
    uses: &[QueueUse],
    charged: &[(usize, Option<String>)],
    now: i64,
) -> StoreResult<()> {
    let charges = gated::charges(queues, uses, charged);
    for (queue, tokens) in charges.queues {
        sqlx::query(sql::TASK_LEASE_GATED_CHARGE)
            .bind(tokens)
            .bind(now)
            .bind(queue)
            .execute(j.conn())
            .await?;
    }
    for (queue, key, tokens) in charges.keys {
        sqlx::query(sql::TASK_LEASE_GATED_CHARGE_KEY)
            .bind(queue)
            .bind(key)
            .bind(tokens)
            .bind(now)
            .execute(j.conn())
            .await?;
    }
    Ok(())
}

// The limits of the gated lease on MySQL (`LimitRead`): cooldowns and bucket rows read
// in the lease's job, bucket rows locked (`FOR UPDATE`) after the queue rows, and the bucket
// charges written in the same job.

impl LimitRead for Reads<'_, '_> {
    async fn limit_cooldowns(
        &mut self,
        now: i64,
    ) -> StoreResult<Vec<(String, String, String, i64)>> {
        Ok(sqlx::query_as(sql::LEASE_LIMITS_COOLDOWNS)
            .bind(now)
            .fetch_all(self.j.conn())
            .await?)
    }

    async fn limit_bucket_names(&mut self, qi: usize) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(sql::LEASE_LIMITS_BUCKET_NAMES)
            .bind(&self.queues[qi])
            .fetch_all(self.j.conn())
            .await?)
    }

    async fn limit_bucket(&mut self, name: &str) -> StoreResult<Option<(String, f64, i64)>> {
        Ok(sqlx::query_as(sql::LEASE_LIMITS_BUCKET)
            .bind(name)
            .fetch_optional(self.j.conn())
            .await?)
    }

    async fn limit_bucket_leased(&mut self, name: &str) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(sql::BUCKET_LEASED)
            .bind(name)
            .fetch_one(self.j.conn())
            .await?)
    }

    async fn limit_candidate_buckets(&mut self, seqs: &[i64]) -> StoreResult<Vec<(i64, String)>> {
        let list = serde_json::to_string(seqs)
            .map_err(|e| super::super::StoreError::Internal(Box::new(e)))?;
        Ok(sqlx::query_as(sql::LEASE_LIMITS_CANDIDATE_BUCKETS)
            .bind(list)
            .fetch_all(self.j.conn())
            .await?)
    }
}

/// Takes one token per lease granted from each rate-limited bucket charged.
async fn charge_buckets<'a>(
    j: &mut Job,
    limits: &'a Limits,
    granted: impl Iterator<Item = &'a str>,
    now: i64,
) -> StoreResult<()> {
    for (name, tokens) in bucket_charges(limits, granted) {
        sqlx::query(sql::LEASE_LIMITS_CHARGE)
            .bind(tokens)
            .bind(now)
            .bind(name)
            .execute(j.conn())
            .await?;
    }
    Ok(())
}
