//! Limit buckets and cooldowns in the gated lease, written once for every
//! database: which buckets a batch may charge (its queues' own, and those its
//! queues' tasks named), each read under the bucket row's lock and refilled to
//! now with the leases its tasks hold, and the live cooldowns (keys closed for
//! their queue, buckets with no budget). Each backend reads through
//! [`LimitRead`], in the lease's transaction (or the writer's batch), after
//! locking its queue rows: queues first, then buckets, each in name order, so
//! two leases never wait on each other in a cycle.
//!
//! Only a queue whose settings name a bucket, whose tasks named one, or with a
//! live cooldown takes the gated lease for it (`Settings::gated`); the plain
//! lease pays nothing.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::{StoreError, StoreResult};
use crate::domain::admission::QueueUse;
use crate::domain::bucket::{BucketConfig, BucketUse};

/// A database's reads for the limits of a gated lease.
pub(crate) trait LimitRead {
    /// Live cooldowns at `now`: `(queue, key, bucket, until_ms)`.
    async fn limit_cooldowns(
        &mut self,
        now: i64,
    ) -> StoreResult<Vec<(String, String, String, i64)>>;
    /// The buckets the tasks of queue `qi` named themselves.
    async fn limit_bucket_names(&mut self, qi: usize) -> StoreResult<Vec<String>>;
    /// One bucket's row `(config, tokens, refilled_at)`, locked until the
    /// lease ends; `None` when it is not defined.
    async fn limit_bucket(&mut self, name: &str) -> StoreResult<Option<(String, f64, i64)>>;
    /// The leases the bucket's tasks hold.
    async fn limit_bucket_leased(&mut self, name: &str) -> StoreResult<i64>;
    /// The buckets of these candidates (by seq) that name one.
    async fn limit_candidate_buckets(&mut self, seqs: &[i64]) -> StoreResult<Vec<(i64, String)>>;
}

/// What a gated lease knows of the buckets and cooldowns of its batch.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    /// Defined buckets the batch may charge, by name.
    pub buckets: HashMap<String, BucketUse>,
    /// Per queue of the batch: its keys in a cooldown.
    pub cooled_keys: Vec<HashSet<String>>,
}

impl Limits {
    /// Whether any bucket applies (candidates' buckets must be read).
    pub fn any_bucket(&self) -> bool {
        !self.buckets.is_empty()
    }

    /// Leases each bucket allows now.
    pub fn budgets(&self) -> HashMap<String, u64> {
        self.buckets
            .iter()
            .map(|(n, u)| (n.clone(), u.budget()))
            .collect()
    }
}

/// A bucket's stored settings from their JSON column.
pub(crate) fn parse_bucket(name: &str, json: &str) -> StoreResult<BucketConfig> {
    serde_json::from_str(json)
        .map_err(|e| StoreError::Corrupt(format!("bucket {name} settings: {e}")))
}

/// Reads the limits of a batch over `queues` (their `uses` read already).
pub(crate) async fn load(
    read: &mut impl LimitRead,
    queues: &[String],
    uses: &[QueueUse],
    now: i64,
) -> StoreResult<Limits> {
    let mut names: BTreeSet<String> = BTreeSet::new();
    for (qi, usage) in uses.iter().enumerate() {
        if let Some(b) = &usage.config.bucket {
            names.insert(b.clone());
        }
        names.extend(read.limit_bucket_names(qi).await?);
    }
    let cooldowns = read.limit_cooldowns(now).await?;
    let mut limits = Limits {
        buckets: HashMap::new(),
        cooled_keys: vec![HashSet::new(); queues.len()],
    };
    let mut bucket_cooldowns: HashMap<String, i64> = HashMap::new();
    for (queue, key, bucket, until) in cooldowns {
        if !bucket.is_empty() {
            bucket_cooldowns.insert(bucket, until);
        } else if let Some(qi) = queues.iter().position(|q| *q == queue) {
            limits.cooled_keys[qi].insert(key);
        }
    }
    // In name order: the lock order of bucket rows.
    for name in names {
        let Some((json, tokens, refilled_at)) = read.limit_bucket(&name).await? else {
            continue;
        };
        let config = parse_bucket(&name, &json)?;
        let leased = if config.max_concurrent > 0 {
            read.limit_bucket_leased(&name).await?.max(0) as u64
        } else {
            0
        };
        let use_ = BucketUse {
            tokens: config
                .rate_limit
                .map(|l| l.refill(tokens, refilled_at, now)),
            leased,
            cooldown_until: bucket_cooldowns.get(&name).copied(),
            config,
        };
        limits.buckets.insert(name, use_);
    }
    // A bucket in a cooldown holds its tasks even when it is not defined.
    for (name, until) in bucket_cooldowns {
        limits.buckets.entry(name).or_insert_with(|| BucketUse {
            cooldown_until: Some(until),
            ..BucketUse::default()
        });
    }
    Ok(limits)
}

/// The tokens each rate-limited bucket holds after `granted` (the buckets of
/// the tasks leased, one entry per lease): `(bucket, tokens)`.
pub(crate) fn bucket_charges<'a>(
    limits: &'a Limits,
    granted: impl Iterator<Item = &'a str>,
) -> Vec<(&'a str, f64)> {
    let mut n: HashMap<&str, f64> = HashMap::new();
    for b in granted {
        *n.entry(b).or_default() += 1.0;
    }
    let mut out: Vec<(&str, f64)> = limits
        .buckets
        .iter()
        .filter_map(|(name, u)| {
            let t = u.tokens?;
            let taken = n.get(name.as_str()).copied()?;
            Some((name.as_str(), t - taken))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(b.0));
    out
}
