//! Leasing on MySQL: every lease statement of the store is here.
//!
//! The plain lease (with routing) reads each queue's first candidates in lease
//! order with `SELECT ... FOR UPDATE SKIP LOCKED` (the `tasks_lease` index is in
//! that order, so only the rows returned are read and locked), merges and cuts
//! them here (count, reply budget, one copy per distinct fan-out group), then
//! leases them with one UPDATE by primary key and reads them back, all in the
//! job's transaction: MySQL has no UPDATE ... RETURNING. Rows another replica
//! holds are skipped, never waited for. Rows locked here but not taken set
//! `Job::spare`, so other replicas' long-polls look again after the commit.
//!
//! Every lease first locks the row of its worker (of each worker of a batch, in
//! id order) in `lease_workers` ([`lock_workers`]): what a worker holds (one
//! copy of a distinct fan-out group, its per-worker cap) is then read after any
//! other lease of the same worker committed, on any replica. Leases of different
//! workers never wait for each other there.
//!
//! The gated lease then locks the `queues` rows of its gated queues (in name
//! order), so the leases counted and the tokens read are exactly what the next
//! gated lease of any replica sees; its candidates are ranked by SQL (window
//! functions) and admitted by [`Plan`].

use std::collections::{HashMap, HashSet};

use super::super::admission::{Assigned, MAX_PASSES, Offer, Plan, SortKey, window};
use super::super::flow::of_row;
use super::super::row::{TaskRow, duration_ms, ms, sort_lease_order};
use super::super::*;
use super::{Job, TASK_COLUMNS};
use crate::domain::admission::{Candidate, Fairness, QueueConfig, QueueUse};
use crate::domain::event::EventKind;

/// Whether the worker of the lease at hand may take the `tasks` row at hand:
/// binds, in order, its id, its labels (a JSON object), its id, now, its id.
/// An untargeted task with no reservation and no distinct fan-out group passes
/// at the first test, reading only its own columns.
const MAY_TAKE: &str = "((target_worker IS NULL AND target_labels IS NULL \
      AND reserved_for IS NULL AND NOT fanout_distinct) \
    OR ((target_worker IS NULL OR target_worker = ?) \
      AND (target_labels IS NULL OR JSON_CONTAINS(?, target_labels)) \
      AND (reserved_for IS NULL OR reserved_for = ? OR reserved_until <= ?) \
      AND (NOT fanout_distinct OR NOT EXISTS (SELECT 1 FROM tasks c \
        WHERE c.fanout_group = tasks.fanout_group AND c.leased_by = ? \
          AND c.state IN ('leased', 'succeeded')))))";

/// Leases the tasks of `seqs` (pending ones) to a worker and reads them back.
async fn lease_seqs(
    j: &mut Job,
    seqs: &[i64],
    worker: &str,
    address: &str,
    lease_ms: i64,
    now: i64,
) -> StoreResult<Vec<TaskRow>> {
    if seqs.is_empty() {
        return Ok(Vec::new());
    }
    // Each lease token is this call's random prefix and the row's seq: unique,
    // and it names exactly the rows this UPDATE changed (a row another
    // transaction leased meanwhile is not pending here any more).
    let batch = uuid::Uuid::new_v4().simple().to_string();
    let mut qb = sqlx::QueryBuilder::<sqlx::MySql>::new(
        "UPDATE tasks SET state = 'leased', attempt = attempt + 1, \
         fencing_token = fencing_token + 1, lease_token = CONCAT(",
    );
    qb.push_bind(&batch).push(", '.', seq), leased_by = ");
    qb.push_bind(worker)
        .push(", lease_duration_ms = ")
        .push_bind(lease_ms)
        .push(", lease_expires_at = LEAST(")
        .push_bind(now.saturating_add(lease_ms))
        .push(", COALESCE(deadline, 9223372036854775807)), updated_at = ")
        .push_bind(now)
        .push(", leased_at = ")
        .push_bind(now)
        .push(", leased_address = ")
        .push_bind(address)
        .push(" WHERE state = 'pending' AND seq IN (");
    let mut sep = qb.separated(", ");
    for s in seqs {
        sep.push_bind(*s);
    }
    qb.push(")");
    qb.build().execute(j.conn()).await?;
    let mut qb = sqlx::QueryBuilder::<sqlx::MySql>::new(format!(
        "SELECT {TASK_COLUMNS} FROM tasks WHERE lease_token = CONCAT("
    ));
    qb.push_bind(&batch).push(", '.', seq) AND seq IN (");
    let mut sep = qb.separated(", ");
    for s in seqs {
        sep.push_bind(*s);
    }
    qb.push(")");
    let rows = qb.build_query_as::<TaskRow>().fetch_all(j.conn()).await?;
    for r in &rows {
        j.push(of_row(r, EventKind::Leased, now));
    }
    Ok(rows)
}

/// A READY task the request may take, with what ordering and cutting need.
#[derive(sqlx::FromRow)]
struct Cand {
    seq: i64,
    priority: i64,
    lease_deadline: i64,
    run_at: i64,
    size: i64,
    fgroup: Option<String>,
}

/// Per queue, how many more leases this worker may take: `max_tasks` where the
/// queue has no cap, else what its cap leaves.
async fn room(j: &mut Job, p: &LeaseParams) -> StoreResult<Vec<i64>> {
    let mut out = Vec::with_capacity(p.queues.len());
    for q in &p.queues {
        out.push(match p.routing.max_leases_per_worker.get(q) {
            None | Some(0) => i64::from(p.max_tasks),
            Some(&cap) => {
                let held: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM tasks WHERE state = 'leased' AND queue = ? \
                     AND leased_by = ?",
                )
                .bind(q)
                .bind(&p.worker_id)
                .fetch_one(j.conn())
                .await?;
                (i64::from(cap) - held).clamp(0, i64::from(p.max_tasks))
            }
        });
    }
    Ok(out)
}

/// Locks the `lease_workers` rows of `workers` until the job ends, in id
/// order (no two batches wait for each other in a cycle), adding the rows of
/// workers that never leased before.
async fn lock_workers(j: &mut Job, workers: &[&str]) -> StoreResult<()> {
    let mut workers = workers.to_vec();
    workers.sort_unstable();
    workers.dedup();
    let locked = lock_worker_rows(j, &workers).await?;
    let missing: Vec<&str> = workers
        .into_iter()
        .filter(|w| !locked.iter().any(|l| l == w))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    // A row inserted here stays locked by this job; one another job inserted
    // meanwhile is waited for, then locked below.
    let mut qb =
        sqlx::QueryBuilder::<sqlx::MySql>::new("INSERT IGNORE INTO lease_workers (worker_id) ");
    qb.push_values(&missing, |mut b, w| {
        b.push_bind(*w);
    });
    qb.build().execute(j.conn()).await?;
    lock_worker_rows(j, &missing).await?;
    Ok(())
}

/// Locks the existing `lease_workers` rows of `workers` (sorted), in id order.
async fn lock_worker_rows(j: &mut Job, workers: &[&str]) -> StoreResult<Vec<String>> {
    let mut qb = sqlx::QueryBuilder::<sqlx::MySql>::new(
        "SELECT worker_id FROM lease_workers WHERE worker_id IN (",
    );
    let mut sep = qb.separated(", ");
    for w in workers {
        sep.push_bind(*w);
    }
    qb.push(") ORDER BY worker_id FOR UPDATE");
    Ok(qb.build_query_scalar().fetch_all(j.conn()).await?)
}

/// Leases up to `p.max_tasks` READY tasks of `p.queues` to `p.worker_id`.
pub(super) async fn lease(j: &mut Job, p: &LeaseParams) -> StoreResult<Vec<TaskRecord>> {
    lock_workers(j, &[p.worker_id.as_str()]).await?;
    lease_locked(j, p).await
}

/// [`lease`], its worker's row locked already.
async fn lease_locked(j: &mut Job, p: &LeaseParams) -> StoreResult<Vec<TaskRecord>> {
    let now = ms(p.now);
    let labels = p.routing.labels_json();
    let room = room(j, p).await?;
    let sql = format!(
        "SELECT seq, priority, lease_deadline, run_at, \
           CAST({} AS SIGNED) AS size, \
           CASE WHEN fanout_distinct THEN fanout_group END AS fgroup \
         FROM tasks WHERE state = 'pending' AND queue = ? AND run_at <= ? \
           AND lease_deadline > ? AND {MAY_TAKE} \
         ORDER BY priority DESC, lease_deadline, run_at, seq LIMIT ? \
         FOR UPDATE SKIP LOCKED",
        crate::store::reply::size_sql(crate::store::reply::Dialect::Mysql),
    );
    let mut found: Vec<Cand> = Vec::new();
    for (queue, &limit) in p.queues.iter().zip(&room) {
        if limit <= 0 {
            continue;
        }
        let rows: Vec<Cand> = sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
            .bind(queue)
            .bind(now)
            .bind(now)
            .bind(&p.worker_id)
            .bind(&labels)
            .bind(&p.worker_id)
            .bind(now)
            .bind(&p.worker_id)
            .bind(limit)
            .fetch_all(j.conn())
            .await?;
        found.extend(rows);
    }
    if found.is_empty() {
        return Ok(Vec::new());
    }
    found.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.lease_deadline.cmp(&b.lease_deadline))
            .then(a.run_at.cmp(&b.run_at))
            .then(a.seq.cmp(&b.seq))
    });
    let locked = found.len();
    found.truncate(usize::try_from(p.max_tasks).unwrap_or(usize::MAX));
    // The first task always; then while the reply's bytes stay within the
    // budget. Of a distinct fan-out group, only its first copy.
    let budget = i64::try_from(p.max_reply_bytes).unwrap_or(i64::MAX);
    let mut total: i64 = 0;
    let mut groups: Vec<&str> = Vec::new();
    let mut taken: Vec<i64> = Vec::with_capacity(found.len());
    for cand in &found {
        total = total.saturating_add(cand.size);
        let first_copy = match cand.fgroup.as_deref() {
            None => true,
            Some(g) if groups.contains(&g) => false,
            Some(g) => {
                groups.push(g);
                true
            }
        };
        if (total <= budget || total == cand.size) && first_copy {
            taken.push(cand.seq);
        }
    }
    if taken.len() < locked {
        j.spare = true;
    }
    let lease_ms = duration_ms(p.lease_duration);
    let rows = lease_seqs(j, &taken, &p.worker_id, &p.worker_address, lease_ms, now).await?;
    let mut records = rows
        .into_iter()
        .map(TaskRow::into_record)
        .collect::<StoreResult<Vec<_>>>()?;
    sort_lease_order(&mut records);
    Ok(records)
}

/// Several requests for the same queues, served in one transaction: the READY
/// tasks are shared out as [`lease_shares`] says, then a request that got less
/// than its share (routing, its cap) leaves the rest to the others, who ask
/// again for what they still want, in request order.
pub(super) async fn lease_many(
    j: &mut Job,
    ps: &[LeaseParams],
) -> StoreResult<Vec<Vec<TaskRecord>>> {
    let Some(first) = ps.first() else {
        return Ok(Vec::new());
    };
    if ps.len() == 1 {
        return Ok(vec![lease(j, first).await?]);
    }
    let workers: Vec<&str> = ps.iter().map(|p| p.worker_id.as_str()).collect();
    lock_workers(j, &workers).await?;
    let now = ps.iter().map(|p| p.now).max().unwrap_or(first.now);
    let wanted: Vec<u32> = ps.iter().map(|p| p.max_tasks).collect();
    let demand: i64 = wanted.iter().map(|&w| i64::from(w)).sum();
    let mut qb = sqlx::QueryBuilder::<sqlx::MySql>::new(
        "SELECT count(*) FROM (SELECT 1 FROM tasks WHERE state = 'pending' AND queue IN (",
    );
    let mut sep = qb.separated(", ");
    for q in &first.queues {
        sep.push_bind(q);
    }
    qb.push(") AND run_at <= ")
        .push_bind(ms(now))
        .push(" AND lease_deadline > ")
        .push_bind(ms(now))
        .push(" LIMIT ")
        .push_bind(demand)
        .push(") x");
    let available: i64 = qb.build_query_scalar().fetch_one(j.conn()).await?;
    let shares = lease_shares(&wanted, usize::try_from(available).unwrap_or(0));
    let mut out = Vec::with_capacity(ps.len());
    for (p, &share) in ps.iter().zip(&shares) {
        if share == 0 {
            out.push(Vec::new());
            continue;
        }
        let p = LeaseParams {
            max_tasks: share,
            now,
            ..p.clone()
        };
        out.push(lease_locked(j, &p).await?);
    }
    if out
        .iter()
        .zip(&shares)
        .any(|(got, &share)| got.len() < share as usize)
    {
        for (p, got) in ps.iter().zip(out.iter_mut()) {
            let more = p
                .max_tasks
                .saturating_sub(u32::try_from(got.len()).unwrap_or(u32::MAX));
            if more == 0 {
                continue;
            }
            let p = LeaseParams {
                max_tasks: more,
                now,
                ..p.clone()
            };
            got.extend(lease_locked(j, &p).await?);
        }
    }
    Ok(out)
}

// ---- the gated lease ----

/// What the gated lease knows of one queue, and its bucket as read; its
/// `queues` row stays locked until the job ends.
async fn load_use(j: &mut Job, queue: &str, now: i64) -> StoreResult<QueueUse> {
    let row: Option<(String, f64, i64)> =
        sqlx::query_as("SELECT config, tokens, refilled_at FROM queues WHERE name = ? FOR UPDATE")
            .bind(queue)
            .fetch_optional(j.conn())
            .await?;
    let Some((json, tokens, refilled_at)) = row else {
        return Ok(QueueUse::default());
    };
    let config = super::admission::parse(queue, &json)?;
    let mut usage = QueueUse {
        tokens: config
            .rate_limit
            .map(|l| l.refill(tokens, refilled_at, now)),
        ..QueueUse::default()
    };
    if config.max_concurrent > 0 {
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM tasks WHERE state = 'leased' AND queue = ?")
                .bind(queue)
                .fetch_one(j.conn())
                .await?;
        usage.leased = n.max(0) as u64;
    }
    if config.max_concurrent_per_key > 0 {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT concurrency_key, count(*) FROM tasks WHERE state = 'leased' AND queue = ? \
             AND concurrency_key IS NOT NULL GROUP BY concurrency_key",
        )
        .bind(queue)
        .fetch_all(j.conn())
        .await?;
        for (k, n) in rows {
            usage.leased_per_key.insert(k, n.max(0) as u64);
        }
    }
    usage.config = config;
    Ok(usage)
}

/// Loads the per-key buckets of `keys` not loaded yet (refilled to `now`).
async fn load_key_tokens(
    j: &mut Job,
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
    let mut qb = sqlx::QueryBuilder::<sqlx::MySql>::new(
        "SELECT `key`, tokens, refilled_at FROM queue_key_tokens WHERE queue = ",
    );
    qb.push_bind(queue).push(" AND `key` IN (");
    let mut sep = qb.separated(", ");
    for k in &missing {
        sep.push_bind(*k);
    }
    qb.push(")");
    let rows: Vec<(String, f64, i64)> = qb.build_query_as().fetch_all(j.conn()).await?;
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

/// The candidate scan: READY tasks of the queue in effective lease order,
/// leaving out closed keys and tasks offered already; routing is decided here
/// for each request of the batch.
#[allow(clippy::too_many_arguments)]
async fn candidates(
    j: &mut Job,
    ps: &[LeaseParams],
    queue: &str,
    qi: usize,
    config: &QueueConfig,
    closed: &HashSet<String>,
    seen: &[i64],
    limit: usize,
    now: i64,
) -> StoreResult<Vec<Offer>> {
    let aging = config.aging_ms().unwrap_or(0);
    // Round robin: a key's n-th READY task takes its turn in the n-th round, and
    // within a round the key served longest ago (`queue_key_turns`) goes first.
    let fair = config.fairness == Fairness::RoundRobinKeys;
    let (last, krn, turn) = if fair {
        (
            "COALESCE((SELECT k.served FROM queue_key_turns k WHERE k.queue = tasks.queue \
             AND k.`key` = COALESCE(tasks.concurrency_key, '')), 0)",
            "row_number() OVER (PARTITION BY COALESCE(concurrency_key, ''), eff \
             ORDER BY lease_deadline, run_at, seq)",
            "row_number() OVER (PARTITION BY eff \
             ORDER BY krn, last, lease_deadline, run_at, seq)",
        )
    } else {
        ("0", "1", "1")
    };
    let eff = if aging > 0 {
        format!("CAST(priority + FLOOR(GREATEST({now} - run_at, 0) / {aging}) AS SIGNED)")
    } else {
        "priority".to_string()
    };
    let cols = "seq, concurrency_key, lease_deadline, run_at, size, target_worker, \
        target_labels, reserved_for, reserved_until, fanout_distinct, fanout_group";
    let mut qb = sqlx::QueryBuilder::<sqlx::MySql>::new(format!(
        "SELECT {cols}, eff, CAST(turn AS SIGNED) AS turn FROM (SELECT {cols}, eff, \
           {turn} AS turn FROM (SELECT {cols}, eff, last, {krn} AS krn FROM (\
           SELECT {cols0}, {eff} AS eff, {last} AS last FROM tasks \
           WHERE state = 'pending' AND queue = ",
        cols0 = "seq, concurrency_key, lease_deadline, run_at, \
            CAST("
            .to_string()
            + &crate::store::reply::size_sql(crate::store::reply::Dialect::Mysql)
            + " AS SIGNED) AS size, target_worker, target_labels, reserved_for, \
               reserved_until, fanout_distinct, fanout_group",
    ));
    qb.push_bind(queue)
        .push(" AND run_at <= ")
        .push_bind(now)
        .push(" AND lease_deadline > ")
        .push_bind(now);
    if !closed.is_empty() {
        qb.push(" AND (concurrency_key IS NULL OR concurrency_key NOT IN (");
        let mut sep = qb.separated(", ");
        for k in closed {
            sep.push_bind(k.clone());
        }
        qb.push("))");
    }
    if !seen.is_empty() {
        qb.push(" AND seq NOT IN (");
        let mut sep = qb.separated(", ");
        for s in seen {
            sep.push_bind(*s);
        }
        qb.push(")");
    }
    qb.push(" ORDER BY priority DESC, lease_deadline, run_at, seq");
    // Without aging or fairness the index order is the lease order: read only
    // the first rows. With them, every READY row of the queue is ranked.
    if aging == 0 && !fair {
        qb.push(" LIMIT ").push_bind(limit as i64);
    }
    qb.push(") a) b) c ORDER BY eff DESC, turn, lease_deadline, run_at, seq LIMIT ")
        .push_bind(limit as i64);
    let rows: Vec<GatedRow> = qb.build_query_as().fetch_all(j.conn()).await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let open = r.target_worker.is_none()
            && r.target_labels.is_none()
            && r.reserved_for.is_none()
            && !r.fanout_distinct;
        let elig = if open {
            None
        } else {
            let labels: Option<std::collections::BTreeMap<String, String>> = match &r.target_labels
            {
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
                let ok = ok && (!r.fanout_distinct || !holds_copy(j, &r.fanout_group, w).await?);
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

/// Whether `worker` holds or completed a copy of a distinct fan-out group.
async fn holds_copy(j: &mut Job, group: &Option<String>, worker: &str) -> StoreResult<bool> {
    let Some(g) = group else { return Ok(false) };
    let n: Option<i64> = sqlx::query_scalar(
        "SELECT 1 FROM tasks WHERE fanout_group = ? AND leased_by = ? \
         AND state IN ('leased', 'succeeded') LIMIT 1",
    )
    .bind(g)
    .bind(worker)
    .fetch_optional(j.conn())
    .await?;
    Ok(n.is_some())
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
    // Lock the queues' rows in name order (no deadlock between batches).
    let mut order: Vec<usize> = (0..queues.len()).collect();
    order.sort_by(|&a, &b| queues[a].cmp(&queues[b]));
    let mut uses: Vec<Option<QueueUse>> = vec![None; queues.len()];
    for i in order {
        uses[i] = Some(load_use(j, &queues[i], now).await?);
    }
    let mut uses: Vec<QueueUse> = uses.into_iter().map(Option::unwrap_or_default).collect();
    let mut holds: HashMap<(String, String), u64> = HashMap::new();
    for p in ps {
        for (queue, &cap) in &p.routing.max_leases_per_worker {
            let pair = (p.worker_id.clone(), queue.clone());
            if cap > 0 && queues.contains(queue) && !holds.contains_key(&pair) {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM tasks WHERE state = 'leased' AND queue = ? \
                     AND leased_by = ?",
                )
                .bind(queue)
                .bind(&p.worker_id)
                .fetch_one(j.conn())
                .await?;
                holds.insert(pair, n.max(0) as u64);
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
            let config = uses[qi].config.clone();
            let cands = candidates(
                j,
                ps,
                queue,
                qi,
                &config,
                &closed[qi],
                &seen[qi],
                window,
                now,
            )
            .await?;
            let keys: Vec<&str> = cands.iter().filter_map(|o| o.cand.key.as_deref()).collect();
            load_key_tokens(j, queue, &mut uses[qi], &keys, now).await?;
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
    for Assigned {
        cand,
        queue,
        request,
    } in &taken
    {
        let Some(row) = by_seq.remove(&cand.seq) else {
            continue;
        };
        j.push(of_row(&row, EventKind::Leased, now));
        charged.push((*queue, row.concurrency_key.clone()));
        out[*request].push(row.into_record()?);
    }
    charge(j, queues, &uses, &charged, now).await?;
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

/// Round robin: records the keys served, in the order granted (see the SQLite
/// store's `turns`).
async fn turns(
    j: &mut Job,
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
        let counter: i64 = sqlx::query_scalar("SELECT served FROM queues WHERE name = ?")
            .bind(queue)
            .fetch_optional(j.conn())
            .await?
            .unwrap_or(0);
        for (key, at) in &order.last {
            sqlx::query(
                "INSERT INTO queue_key_turns (queue, `key`, served) VALUES (?, ?, ?) \
                 ON DUPLICATE KEY UPDATE served = VALUES(served)",
            )
            .bind(queue)
            .bind(key)
            .bind(counter + at)
            .execute(j.conn())
            .await?;
        }
        sqlx::query("UPDATE queues SET served = ? WHERE name = ?")
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
    for (qi, queue) in queues.iter().enumerate() {
        let usage = &uses[qi];
        let granted: Vec<&Option<String>> = charged
            .iter()
            .filter(|(q, _)| *q == qi)
            .map(|(_, k)| k)
            .collect();
        if let Some(t) = usage.tokens {
            sqlx::query("UPDATE queues SET tokens = ?, refilled_at = ? WHERE name = ?")
                .bind(t - granted.len() as f64)
                .bind(now)
                .bind(queue)
                .execute(j.conn())
                .await?;
        }
        if let Some(limit) = usage.config.per_key_rate_limit {
            let mut per_key: HashMap<&str, f64> = HashMap::new();
            for k in granted.into_iter().flatten() {
                *per_key.entry(k).or_default() += 1.0;
            }
            for (k, n) in per_key {
                let before = usage
                    .key_tokens
                    .get(k)
                    .copied()
                    .unwrap_or_else(|| limit.capacity());
                sqlx::query(
                    "INSERT INTO queue_key_tokens (queue, `key`, tokens, refilled_at) \
                     VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE \
                     tokens = VALUES(tokens), refilled_at = VALUES(refilled_at)",
                )
                .bind(queue)
                .bind(k)
                .bind(before - n)
                .bind(now)
                .execute(j.conn())
                .await?;
            }
        }
    }
    Ok(())
}
