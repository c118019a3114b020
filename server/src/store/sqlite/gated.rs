//! The gated lease on SQLite (`Leasing::task_lease_gated`), one writer job: the candidates each request may
//! take, admitted against the queues' and keys' limits and buckets (counted and
//! read in the same batch, so exactly what the next lease sees), then leased and
//! charged.

use std::collections::{HashMap, HashSet};

use rusqlite::{Connection, OptionalExtension, params};

use super::super::admission::{Assigned, Offer, Plan};
use super::super::gated::{self, GatedRead};
use super::super::limits;
use super::super::limits::{LimitRead, Limits, bucket_charges};
use super::super::row::IntoRecord;
use super::super::row::{TaskRow, duration_ms, ms, sort_lease_order};
use super::super::*;
use super::admission::{json_text, parse};
use super::rows::task_row;
use super::{sql, tx};
use crate::domain::admission::{Candidate, Fairness, QueueConfig, QueueUse};

/// What the gated lease knows of one queue, and its bucket as read.
fn load_use(read: &mut Reads<'_>, qi: usize) -> StoreResult<QueueUse> {
    let queues = read.queues;
    let queue = &queues[qi];
    let row: Option<(String, f64, i64)> = read
        .c
        .prepare_cached(sql::TASK_LEASE_GATED_QUEUES)?
        .query_row(params![queue], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let Some((json, tokens, refilled_at)) = row else {
        return Ok(QueueUse::default());
    };
    let config = parse(queue, &json)?;
    let now = read.now;
    gated::run_ready(gated::load_use(
        read,
        qi,
        config,
        (tokens, refilled_at),
        now,
    ))
}

/// The gated passes' reads, on the writer's connection (calls, never a wait).
pub(super) struct Reads<'c> {
    pub(super) c: &'c Connection,
    pub(super) queues: &'c [String],
    now: i64,
    batch: Batch,
}

impl GatedRead for Reads<'_> {
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
        let (queue, now, batch) = (&self.queues[qi], self.now, &self.batch);
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
        let mut st = self.c.prepare_cached(pick)?;
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

    async fn key_buckets(
        &mut self,
        qi: usize,
        keys: &[&str],
    ) -> StoreResult<Vec<(String, f64, i64)>> {
        let list = serde_json::to_string(keys).map_err(|e| StoreError::Internal(Box::new(e)))?;
        let mut st = self.c.prepare_cached(sql::TASK_LEASE_GATED_KEY_TOKENS)?;
        let rows = st.query_map(params![self.queues[qi], list], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    async fn leased(&mut self, qi: usize) -> StoreResult<i64> {
        Ok(self
            .c
            .prepare_cached(sql::TASK_LEASE_GATED_LEASED)?
            .query_row(params![self.queues[qi]], |r| r.get(0))?)
    }

    async fn leased_per_key(&mut self, qi: usize) -> StoreResult<Vec<(String, i64)>> {
        let mut st = self
            .c
            .prepare_cached(sql::TASK_LEASE_GATED_LEASED_PER_KEY)?;
        let rows = st.query_map(params![self.queues[qi]], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

/// The workers of a gated lease batch (routing), per request.
struct Batch {
    /// Their ids, a JSON array.
    workers: String,
    /// Their labels, a JSON array of objects.
    labels: String,
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
    let mut read = Reads {
        c,
        queues,
        now,
        batch,
    };
    let mut uses = Vec::with_capacity(queues.len());
    for qi in 0..queues.len() {
        uses.push(load_use(&mut read, qi)?);
    }
    // The per-worker caps (routing): what each worker holds counts.
    let mut holds: HashMap<(String, String), u64> = HashMap::new();
    for (worker, queue) in gated::capped_pairs(ps) {
        let n = held(c, &worker, &queue)?;
        holds.insert((worker, queue), n);
    }
    // Limit buckets and cooldowns, read in the same batch.
    let limits = gated::run_ready(limits::load(&mut read, queues, &uses, now))?;
    let mut plan = Plan::new(ps, &uses, gated::held_lookup(&holds));
    gated::run_ready(gated::passes(&mut read, &mut plan, &mut uses, &limits, now))?;
    let taken = plan.into_taken();
    let granted = grant(c, ps, &taken, now)?;
    let bucketed = taken
        .iter()
        .zip(&granted)
        .filter(|(_, row)| row.is_some())
        .filter_map(|(a, _)| a.bucket.as_deref());
    charge_buckets(c, &limits, bucketed, now)?;
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

/// Round robin: records the keys served, in the order granted
/// ([`gated::served`]). Each grant of a round-robin queue takes the next number
/// of the queue's counter; a key keeps the number of its latest grant.
fn turns(
    c: &Connection,
    queues: &[String],
    uses: &[QueueUse],
    charged: &[(usize, Option<String>)],
) -> StoreResult<()> {
    for (queue, order) in gated::served(queues, uses, charged) {
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
    let charges = gated::charges(queues, uses, charged);
    for (queue, tokens) in charges.queues {
        c.prepare_cached(sql::TASK_LEASE_GATED_CHARGE)?
            .execute(params![queue, tokens, now])?;
    }
    if !charges.keys.is_empty() {
        let mut put = c.prepare_cached(sql::TASK_LEASE_GATED_CHARGE_KEY)?;
        for (queue, key, tokens) in charges.keys {
            put.execute(params![queue, key, tokens, now])?;
        }
    }
    Ok(())
}

// The limits of the gated lease on SQLite (`LimitRead`): cooldowns and bucket rows
// read on the writer's connection in the lease's batch (the one writer serialises every
// lease), and the bucket charges written in it.

impl LimitRead for Reads<'_> {
    async fn limit_cooldowns(
        &mut self,
        now: i64,
    ) -> StoreResult<Vec<(String, String, String, i64)>> {
        let mut st = self.c.prepare_cached(sql::LEASE_LIMITS_COOLDOWNS)?;
        let rows = st.query_map(params![now], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    async fn limit_bucket_names(&mut self, qi: usize) -> StoreResult<Vec<String>> {
        let mut st = self.c.prepare_cached(sql::LEASE_LIMITS_BUCKET_NAMES)?;
        let rows = st.query_map(params![self.queues[qi]], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    async fn limit_bucket(&mut self, name: &str) -> StoreResult<Option<(String, f64, i64)>> {
        Ok(self
            .c
            .prepare_cached(sql::LEASE_LIMITS_BUCKET)?
            .query_row(params![name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?)
    }

    async fn limit_bucket_leased(&mut self, name: &str) -> StoreResult<i64> {
        Ok(self
            .c
            .prepare_cached(sql::BUCKET_LEASED)?
            .query_row(params![name], |r| r.get(0))?)
    }

    async fn limit_candidate_buckets(&mut self, seqs: &[i64]) -> StoreResult<Vec<(i64, String)>> {
        let mut st = self.c.prepare_cached(sql::LEASE_LIMITS_CANDIDATE_BUCKETS)?;
        let rows = st.query_map(params![json_text(seqs)?], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

/// Takes one token per lease granted from each rate-limited bucket charged.
fn charge_buckets<'a>(
    c: &Connection,
    limits: &'a Limits,
    granted: impl Iterator<Item = &'a str>,
    now: i64,
) -> StoreResult<()> {
    for (name, tokens) in bucket_charges(limits, granted) {
        c.prepare_cached(sql::LEASE_LIMITS_CHARGE)?
            .execute(params![tokens, now, name])?;
    }
    Ok(())
}
