//! Admission (migration 0009): the stored queue settings and what both
//! stores' gated leases share (how the admitted tasks of several queues are
//! merged and handed to the requests served together). The gated leases
//! themselves are `sqlite/admission.rs` and `postgres/admission.rs`.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};

use super::LeaseParams;
use crate::domain::admission::{Candidate, QueueConfig, QueueUse};

#[allow(unused_imports)]
use super::*;
use async_trait::async_trait;

/// A queue's stored settings from their JSON column; a row that does not read
/// back is corrupt, named by its queue.
pub(crate) fn parse_config(name: &str, json: &str) -> StoreResult<QueueConfig> {
    serde_json::from_str(json)
        .map_err(|e| StoreError::Corrupt(format!("queue {name} settings: {e}")))
}

/// `Admission::queue_usage` from four statements: the queue's settings and
/// bucket (`$queue`), its leases (`$queue`), the leases of a key and the key's
/// bucket (`$queue, $key`). The same on every database; only the pool differs.
pub(crate) async fn queue_usage_of<DB>(
    pool: &sqlx::Pool<DB>,
    queue: &str,
    key: Option<&str>,
    now: DateTime<Utc>,
    [settings, leased, key_holders, key_tokens]: [&'static str; 4],
) -> StoreResult<QueueUsage>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> (String, f64, i64): sqlx::FromRow<'r, DB::Row>,
    for<'r> (i64,): sqlx::FromRow<'r, DB::Row>,
    for<'r> (String,): sqlx::FromRow<'r, DB::Row>,
    for<'r> (f64, i64): sqlx::FromRow<'r, DB::Row>,
{
    let now = super::row::ms(now);
    let row: Option<(String, f64, i64)> = sqlx::query_as(settings)
        .bind(queue)
        .fetch_optional(pool)
        .await?;
    let Some((json, tokens, refilled_at)) = row else {
        return Ok(QueueUsage::default());
    };
    let config = parse_config(queue, &json)?;
    let (leased,): (i64,) = sqlx::query_as(leased).bind(queue).fetch_one(pool).await?;
    let mut usage = QueueUsage {
        tokens: config
            .rate_limit
            .map(|l| l.refill(tokens, refilled_at, now)),
        leased: leased.max(0) as u64,
        ..QueueUsage::default()
    };
    if let Some(key) = key {
        let holders: Vec<(String,)> = sqlx::query_as(key_holders)
            .bind(queue)
            .bind(key)
            .fetch_all(pool)
            .await?;
        usage.key_holders = holders.into_iter().map(|(h,)| h).collect();
        if let Some(limit) = config.per_key_rate_limit {
            let b: Option<(f64, i64)> = sqlx::query_as(key_tokens)
                .bind(queue)
                .bind(key)
                .fetch_optional(pool)
                .await?;
            usage.key_tokens = Some(b.map_or(limit.capacity(), |(t, at)| limit.refill(t, at, now)));
        }
    }
    usage.config = config;
    Ok(usage)
}

/// A queue's stored settings.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredQueue {
    pub name: String,
    pub config: QueueConfig,
    /// When an operator last changed it; `None` while it is the configuration's seed.
    pub updated_at: Option<DateTime<Utc>>,
    /// Bumped by every change (compare-and-set for UpdateQueue).
    pub version: i64,
}

/// What Explain needs of a queue and a key, read now.
#[derive(Debug, Clone, Default)]
pub struct QueueUsage {
    pub config: QueueConfig,
    /// Leases held in the queue.
    pub leased: u64,
    /// Tasks holding leases of the key asked about (at most 100).
    pub key_holders: Vec<String>,
    /// The queue bucket's tokens now (refilled), with a rate limit.
    pub tokens: Option<f64>,
    /// The key bucket's tokens now (refilled), with a per-key rate limit.
    pub key_tokens: Option<f64>,
}

/// Gated candidates of a lease are read this many times the demand at a time
/// (more when keys close along the way), in at most [`MAX_PASSES`] reads.
pub const WINDOW_FACTOR: usize = 4;
pub const MAX_PASSES: usize = 8;

/// One admitted task: its candidate row, the index of its queue in the
/// request's queue list, and the request (index into `ps`) it goes to.
#[derive(Debug, Clone)]
pub struct Assigned {
    pub cand: Candidate,
    pub queue: usize,
    pub request: usize,
    /// The limit bucket it is charged to, if a defined one applies.
    pub bucket: Option<String>,
}

/// A READY task a gated lease read, with what routing says about who
/// may take it.
#[derive(Debug, Clone)]
pub struct Offer {
    pub cand: Candidate,
    /// The index of its queue in the requests' queue list.
    pub queue: usize,
    /// The requests (indexes into `ps`, ascending) whose workers may take it, by
    /// target, labels, reservation and the distinct fan-out copies they hold;
    /// `None`: every request (an unrouted task).
    pub elig: Option<Vec<usize>>,
    /// Its fan-out group, when the copies go to distinct workers.
    pub group: Option<String>,
}

/// What became of an offered candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Taken,
    /// Its key is full or out of tokens: the key's other tasks are passed over too.
    KeyClosed,
    /// No request may take it now (routing, a full request, the reply budget,
    /// the worker's cap, the queue's budget).
    Passed,
}

/// The gated lease of a batch of requests served together: the candidates of
/// every queue are offered once, in lease order, and each goes to a request
/// whose worker may take it and has room (in turn among several), within the
/// queue's gates. So each worker gets the first tasks in lease order that it may
/// take and that the gates admit: a task meant for it is never passed over for
/// one ranked after it, and one scan serves the whole batch.
pub struct Plan<'a> {
    ps: &'a [LeaseParams],
    /// Per request: tasks it may still take.
    left: Vec<u32>,
    left_total: usize,
    /// Per request: reply bytes taken.
    bytes: Vec<i64>,
    /// Per queue: leases the queue-wide gates still allow.
    budget: Vec<usize>,
    /// Per queue: leases granted per key in this batch.
    per_key: Vec<HashMap<String, u64>>,
    /// Per request: the index of its worker (requests of one worker share caps
    /// and fan-out copies).
    worker: Vec<usize>,
    /// Per worker and queue: leases its cap still allows (`None`: no cap).
    room: Vec<Vec<Option<u64>>>,
    /// (worker, group): distinct fan-out copies granted in this batch.
    copies: HashSet<(usize, String)>,
    /// The request the next task is offered to first.
    cursor: usize,
    taken: Vec<Assigned>,
    /// Per defined limit bucket: leases it still allows (see `store/limits.rs`).
    bucket_left: HashMap<String, u64>,
    /// The buckets of the candidates read that name a defined one, by seq.
    bucket_of: HashMap<i64, String>,
}

impl<'a> Plan<'a> {
    /// `uses` per queue of `ps[0].queues`; `held(worker, queue)` is the leases the
    /// worker holds in a queue where the requests carry a per-worker cap.
    pub fn new(ps: &'a [LeaseParams], uses: &[QueueUse], held: impl Fn(&str, &str) -> u64) -> Self {
        let queues: &[String] = ps.first().map_or(&[], |p| &p.queues);
        let left: Vec<u32> = ps.iter().map(|p| p.max_tasks).collect();
        let left_total = left.iter().map(|&n| n as usize).sum();
        let mut ids: Vec<&str> = Vec::new();
        let worker: Vec<usize> = ps
            .iter()
            .map(|p| match ids.iter().position(|w| *w == p.worker_id) {
                Some(i) => i,
                None => {
                    ids.push(&p.worker_id);
                    ids.len() - 1
                }
            })
            .collect();
        let mut room = vec![vec![None; queues.len()]; ids.len()];
        for (p, &w) in ps.iter().zip(&worker) {
            for (qi, queue) in queues.iter().enumerate() {
                if let Some(&cap) = p.routing.max_leases_per_worker.get(queue)
                    && cap > 0
                {
                    let free = u64::from(cap).saturating_sub(held(&p.worker_id, queue));
                    room[w][qi] = Some(room[w][qi].map_or(free, |r: u64| r.min(free)));
                }
            }
        }
        Plan {
            ps,
            left,
            left_total,
            bytes: vec![0; ps.len()],
            budget: uses.iter().map(|u| u.budget(left_total)).collect(),
            per_key: vec![HashMap::new(); queues.len()],
            worker,
            room,
            copies: HashSet::new(),
            cursor: 0,
            taken: Vec::new(),
            bucket_left: HashMap::new(),
            bucket_of: HashMap::new(),
        }
    }

    /// The leases each defined bucket allows now.
    pub fn set_bucket_budgets(&mut self, budgets: HashMap<String, u64>) {
        self.bucket_left = budgets;
    }

    /// Records the buckets of candidates read (seq, bucket); only defined
    /// buckets are kept (an undefined one has no limit).
    pub fn note_buckets(&mut self, rows: Vec<(i64, String)>) {
        for (seq, b) in rows {
            if self.bucket_left.contains_key(&b) {
                self.bucket_of.insert(seq, b);
            }
        }
    }

    /// How many more tasks the batch may take now.
    pub fn wanted(&self) -> usize {
        self.left_total.min(self.budget.iter().sum())
    }

    /// Whether queue `q`'s gates allow another lease.
    pub fn open(&self, q: usize) -> bool {
        self.budget.get(q).is_some_and(|&b| b > 0)
    }

    /// Offers the next candidate in lease order.
    pub fn offer(&mut self, o: &Offer, usage: &QueueUse) -> Verdict {
        let q = o.queue;
        if !self.open(q) {
            return Verdict::Passed;
        }
        if let Some(key) = o.cand.key.as_deref() {
            let already = self.per_key[q].get(key).copied().unwrap_or(0);
            if !usage.key_admits(key, already) {
                return Verdict::KeyClosed;
            }
        }
        let bucket = self.bucket_of.get(&o.cand.seq).cloned();
        if let Some(b) = &bucket
            && self.bucket_left.get(b).is_some_and(|&left| left == 0)
        {
            return Verdict::Passed;
        }
        let n = self.ps.len();
        let Some(r) = (0..n)
            .map(|step| (self.cursor + step) % n)
            .find(|&r| self.may_take(r, o))
        else {
            return Verdict::Passed;
        };
        let w = self.worker[r];
        self.left[r] -= 1;
        self.left_total -= 1;
        self.bytes[r] = self.bytes[r].saturating_add(o.cand.size);
        self.budget[q] -= 1;
        if let Some(room) = self.room[w][q].as_mut() {
            *room -= 1;
        }
        if let Some(g) = &o.group {
            self.copies.insert((w, g.clone()));
        }
        if let Some(key) = &o.cand.key {
            *self.per_key[q].entry(key.clone()).or_default() += 1;
        }
        if let Some(left) = bucket.as_ref().and_then(|b| self.bucket_left.get_mut(b)) {
            *left = left.saturating_sub(1);
        }
        self.cursor = (r + 1) % n;
        self.taken.push(Assigned {
            cand: o.cand.clone(),
            queue: q,
            request: r,
            bucket,
        });
        Verdict::Taken
    }

    fn may_take(&self, r: usize, o: &Offer) -> bool {
        if self.left[r] == 0 {
            return false;
        }
        if let Some(elig) = &o.elig
            && elig.binary_search(&r).is_err()
        {
            return false;
        }
        let budget = i64::try_from(self.ps[r].max_reply_bytes).unwrap_or(i64::MAX);
        if self.bytes[r] > 0 && self.bytes[r].saturating_add(o.cand.size) > budget {
            return false;
        }
        let w = self.worker[r];
        if self.room[w][o.queue] == Some(0) {
            return false;
        }
        match &o.group {
            Some(g) => !self.copies.contains(&(w, g.clone())),
            None => true,
        }
    }

    /// Offers one pass's candidates of every queue in lease order, up to
    /// `horizon` (the last candidate read of a queue that may have more: what
    /// ranks after it is read again in the next pass). Each candidate offered is
    /// added to its queue's `seen` (not read again); keys found closed to
    /// `closed`.
    pub fn walk(
        &mut self,
        mut offers: Vec<Offer>,
        horizon: Option<SortKey>,
        uses: &[QueueUse],
        seen: &mut [Vec<i64>],
        closed: &mut [HashSet<String>],
    ) {
        offers.sort_by_key(|o| o.cand.sort_key());
        for o in &offers {
            if self.wanted() == 0 || horizon.is_some_and(|h| o.cand.sort_key() > h) {
                break;
            }
            seen[o.queue].push(o.cand.seq);
            if self.offer(o, &uses[o.queue]) == Verdict::KeyClosed
                && let Some(k) = &o.cand.key
            {
                closed[o.queue].insert(k.clone());
            }
        }
    }

    /// The tasks granted, each with its request.
    pub fn into_taken(self) -> Vec<Assigned> {
        self.taken
    }
}

/// A candidate's place in lease order (see [`Candidate::sort_key`]).
pub type SortKey = (i64, i64, i64, i64, i64);

/// The window of the next candidate read: this many times what the batch still
/// wants, and a little more.
pub fn window(wanted: usize) -> usize {
    wanted.saturating_mul(WINDOW_FACTOR).saturating_add(16)
}

/// Queue settings and the state admission keeps: stored settings, usage, rate-limit
/// buckets, backpressure counts, the dead-letter map, a task's place in line.
#[async_trait]
pub trait Admission: Send + Sync + 'static {
    /// Backpressure: the waiting tasks (pending or blocked) of `queue` and the
    /// sum of their payload bytes.
    async fn queue_pending(&self, queue: &str) -> StoreResult<(u64, u64)>;

    /// Replaces the per-queue dead-letter queues (from the configuration).
    async fn queue_dead_letters_set(&self, pairs: &[(String, String)]) -> StoreResult<()>;

    /// Every queue's stored settings, by name.
    async fn queue_list(&self) -> StoreResult<Vec<StoredQueue>>;

    /// Seeds the settings of the configuration's `[queues.X]`: stored where a
    /// queue has none or only an earlier seed; a queue an operator changed keeps
    /// its settings. Earlier seeds of queues not in `seed` are removed.
    async fn queue_seed(
        &self,
        seed: &[(String, crate::domain::admission::QueueConfig)],
    ) -> StoreResult<()>;

    /// Stores a queue's settings if its stored version is still `version`
    /// (`None`: it has none stored); returns false otherwise. Wakes the queue's
    /// long-polls on every replica.
    async fn queue_put(
        &self,
        name: &str,
        config: &crate::domain::admission::QueueConfig,
        version: Option<i64>,
        now: DateTime<Utc>,
    ) -> StoreResult<bool>;

    /// A queue's settings, leases, the leases of `key`, and its buckets, now.
    async fn queue_usage(
        &self,
        queue: &str,
        key: Option<&str>,
        now: DateTime<Utc>,
    ) -> StoreResult<QueueUsage>;

    /// How many READY tasks of a pending task's queue lease before it, in the
    /// gated lease's order (effective priority, the key's turn under round robin,
    /// deadline, run_at, submission).
    async fn task_ahead(
        &self,
        task: &TaskRecord,
        aging_ms: Option<i64>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64>;

    /// Admission: deletes the per-key rate-limit buckets that are full
    /// again at `now` (a bucket absent is a full one), and those of queues
    /// without a per-key rate limit; returns how many. Run by retention, which
    /// also drops the round-robin turns of queues without round robin and
    /// those [`crate::domain::admission::TURNS_KEPT`] grants old.
    async fn queue_key_tokens_purge(&self, now: DateTime<Utc>) -> StoreResult<u64>;
}

/// `Admission::queue_pending` from the backend's `QUEUE_PENDING` (bound: the
/// queue). The same on every database; only the pool differs.
pub(crate) async fn queue_pending_of<DB>(
    pool: &sqlx::Pool<DB>,
    stmt: &'static str,
    queue: &str,
) -> StoreResult<(u64, u64)>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> (i64, i64): sqlx::FromRow<'r, DB::Row>,
{
    let (n, bytes): (i64, i64) = sqlx::query_as::<DB, (i64, i64)>(stmt)
        .bind(queue)
        .fetch_one(pool)
        .await?;
    Ok((n.max(0) as u64, bytes.max(0) as u64))
}

/// `Admission::queue_list` from the backend's `QUEUE_LIST`. The same on every
/// database; only the pool differs.
pub(crate) async fn queue_list_of<DB>(
    pool: &sqlx::Pool<DB>,
    stmt: &'static str,
) -> StoreResult<Vec<StoredQueue>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'r> (String, String, Option<i64>, i64): sqlx::FromRow<'r, DB::Row>,
{
    let rows: Vec<(String, String, Option<i64>, i64)> =
        sqlx::query_as::<DB, (String, String, Option<i64>, i64)>(stmt)
            .fetch_all(pool)
            .await?;
    rows.into_iter()
        .map(|(name, config, updated_at, version)| {
            Ok(StoredQueue {
                config: parse_config(&name, &config)?,
                name,
                updated_at: updated_at.map(super::row::from_ms),
                version,
            })
        })
        .collect()
}
