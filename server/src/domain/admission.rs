//! Admission, the pure part: a queue's stored settings, the token-bucket
//! math, and which READY candidates a gated lease may take. No I/O: the stores
//! read the rows and call [`admit`]. `now` is always passed in. The gates that
//! hold a task, as ExplainTask tells them, are in [`super::explain`].

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::validate::Invalid;

/// Longest concurrency key, in bytes.
pub const MAX_CONCURRENCY_KEY_LEN: usize = 256;

/// Checks a concurrency key: `[A-Za-z0-9._:@/-]{1,256}` (empty means none).
pub fn concurrency_key(field: &str, key: &str) -> Result<(), Invalid> {
    if key.len() > MAX_CONCURRENCY_KEY_LEN {
        return Err(Invalid::new(
            field,
            format!("is longer than {MAX_CONCURRENCY_KEY_LEN} characters"),
        ));
    }
    if !key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'@' | b'/' | b'-'))
    {
        return Err(Invalid::new(
            field,
            "may only contain A-Z a-z 0-9 . _ : @ / -",
        ));
    }
    Ok(())
}

/// A token bucket's rate: `per_second` tokens a second, at most `burst` held.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RateLimit {
    pub per_second: f64,
    /// 0 means `max(1, ceil(per_second))`.
    #[serde(default)]
    pub burst: u32,
}

impl RateLimit {
    /// Tokens the bucket holds at most.
    pub fn capacity(&self) -> f64 {
        if self.burst > 0 {
            f64::from(self.burst)
        } else {
            self.per_second.ceil().max(1.0)
        }
    }

    /// The tokens of a bucket that held `tokens` at `refilled_at_ms`, at `now_ms`.
    /// A bucket never seen (`refilled_at_ms` 0) is full.
    ///
    /// Tokens come on the bucket's schedule, one every `1 / per_second`: what
    /// accrues past a full bucket is kept while it is less than one token, so a
    /// look that comes late by less than a token's interval takes the token as
    /// of when it was due, and the next token is due when the schedule says,
    /// not one interval after the late grant (at burst 1 every late look would
    /// otherwise lose its lateness from the rate). Only whole tokens are
    /// granted ([`whole_tokens`]), never more than `burst`; a bucket full for a
    /// token's interval or longer starts its schedule over, full.
    pub fn refill(&self, tokens: f64, refilled_at_ms: i64, now_ms: i64) -> f64 {
        let capacity = self.capacity();
        if refilled_at_ms <= 0 {
            return capacity;
        }
        let elapsed = (now_ms - refilled_at_ms).max(0) as f64 / 1000.0;
        let tokens = tokens + elapsed * self.per_second;
        // The margin keeps `whole_tokens` (which forgives 1e-9) at `burst`.
        if tokens < capacity + 1.0 - 1e-6 {
            tokens
        } else {
            capacity
        }
    }

    /// When a bucket holding `tokens` (fewer than one) at `now_ms` has its next one.
    pub fn next_token_ms(&self, tokens: f64, now_ms: i64) -> i64 {
        if whole_tokens(tokens) >= 1.0 || self.per_second <= 0.0 {
            return now_ms;
        }
        let wait = ((1.0 - tokens) / self.per_second * 1000.0).ceil();
        now_ms.saturating_add(wait as i64)
    }

    /// How long a long-poll that found this bucket holding `tokens` waits before
    /// it looks again: until the next token is due, and at least a millisecond.
    /// Waking when the token comes due (not on a fixed recheck) is what keeps the
    /// rate: a bucket of burst 1 that is full drops what it would have accrued,
    /// so every late look loses that much of the rate.
    pub fn wait_for_token(&self, tokens: f64) -> std::time::Duration {
        let ms = (self.next_token_ms(tokens, 0)).max(1);
        std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
    }
}

/// The whole tokens a bucket holding `tokens` can grant. Refills add
/// fractions in floating point, so a bucket that has accrued exactly one token
/// may hold 0.9999999999999999: that counts as one.
pub fn whole_tokens(tokens: f64) -> f64 {
    (tokens + 1e-9).floor().max(0.0)
}

/// How a queue orders READY tasks of equal effective priority.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fairness {
    #[default]
    None,
    RoundRobinKeys,
}

/// Retry fields a queue overrides; the others follow the broker's defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetryOverride {
    pub max_attempts: Option<u32>,
    pub initial_backoff_ms: Option<u64>,
    pub backoff_multiplier: Option<f64>,
    pub max_backoff_ms: Option<u64>,
    pub jitter: Option<f64>,
}

/// A queue's stored settings (the `queues.config` JSON). Absent options follow
/// the broker's defaults, so a change of the defaults reaches every queue that
/// does not set its own.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct QueueConfig {
    pub paused: bool,
    /// Leases held at once in the cluster; 0 = no limit.
    pub max_concurrent: u32,
    pub rate_limit: Option<RateLimit>,
    /// Leases held at once per concurrency key; 0 = no limit.
    pub max_concurrent_per_key: u32,
    pub per_key_rate_limit: Option<RateLimit>,
    pub fairness: Fairness,
    /// Each such wait adds 1 to a READY task's effective priority.
    pub priority_aging_ms: Option<u64>,
    /// Stored for routing's per-worker cap; 0 = no limit.
    pub max_leases_per_worker: u32,
    pub retry: RetryOverride,
    pub default_lease_ms: Option<u64>,
    pub min_lease_ms: Option<u64>,
    pub max_lease_ms: Option<u64>,
    pub max_payload_bytes: Option<u64>,
    pub retention_ms: Option<u64>,
    /// Backpressure: waiting tasks (SCHEDULED, READY, BLOCKED) Submit lets the
    /// queue hold; 0 = no limit.
    pub max_pending: u64,
    /// Backpressure: the waiting tasks' payload bytes; 0 = no limit.
    pub max_pending_bytes: u64,
    /// The limit bucket of the queue's tasks that name none themselves.
    pub bucket: Option<String>,
    /// The JSON Schema document payloads must match (see `payload_schema`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_schema: Option<String>,
}

impl QueueConfig {
    /// Whether leases of this queue go through the gated lease (any gate set).
    /// A queue with none keeps the plain lease statement.
    pub fn gated(&self) -> bool {
        self.paused
            || self.max_concurrent > 0
            || self.rate_limit.is_some()
            || self.max_concurrent_per_key > 0
            || self.per_key_rate_limit.is_some()
            || self.fairness == Fairness::RoundRobinKeys
            || self.priority_aging_ms.is_some_and(|a| a > 0)
            || self.bucket.is_some()
    }

    /// The aging step in ms, when aging is on.
    pub fn aging_ms(&self) -> Option<i64> {
        self.priority_aging_ms
            .filter(|a| *a > 0)
            .map(|a| i64::try_from(a).unwrap_or(i64::MAX))
    }

    /// Checks the admission fields; the first problem names its field.
    pub fn validate(&self) -> Result<(), Invalid> {
        for (field, limit) in [
            ("config.rate_limit", &self.rate_limit),
            ("config.per_key_rate_limit", &self.per_key_rate_limit),
        ] {
            if let Some(l) = limit
                && !(l.per_second.is_finite() && l.per_second > 0.0 && l.per_second <= 1e6)
            {
                return Err(Invalid::new(
                    format!("{field}.per_second"),
                    "must be above 0 and at most 1000000",
                ));
            }
        }
        Ok(())
    }
}

/// A task's effective priority: its priority plus one per full aging step it
/// has been READY (since run_at).
pub fn effective_priority(
    priority: i64,
    run_at_ms: i64,
    now_ms: i64,
    aging_ms: Option<i64>,
) -> i64 {
    match aging_ms {
        Some(step) if step > 0 => priority.saturating_add((now_ms - run_at_ms).max(0) / step),
        _ => priority,
    }
}

/// Round robin keeps, per queue, the number of the latest grant of each key
/// (`queue_key_turns`); a key never served has 0. Rows this many grants behind
/// the queue's counter may be deleted: an absent key ranks as served longest ago,
/// where such a key ranks already.
pub const TURNS_KEPT: i64 = 100_000;

/// What one lease's grants of a round-robin queue change: the grants, in the
/// order taken, number `1..=count` after the queue's counter; each key keeps
/// the number of its latest grant (`last`, in order of first appearance).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub last: Vec<(String, i64)>,
    pub count: i64,
}

/// The turns taken by grants of these keys (`""` for tasks without one), in
/// the order granted; `None` when nothing was granted.
pub fn served_order(keys: &[&str]) -> Option<Served> {
    if keys.is_empty() {
        return None;
    }
    let mut last: Vec<(String, i64)> = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let at = i64::try_from(i).unwrap_or(i64::MAX).saturating_add(1);
        match last.iter_mut().find(|(key, _)| key == k) {
            Some(slot) => slot.1 = at,
            None => last.push(((*k).to_string(), at)),
        }
    }
    Some(Served {
        last,
        count: i64::try_from(keys.len()).unwrap_or(i64::MAX),
    })
}

/// A READY task a gated lease may take, in the order the store read them.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub seq: i64,
    pub key: Option<String>,
    /// Lease order across queues: effective priority (higher first), the key's
    /// turn (round robin; 1 otherwise), deadline (none last), run_at, seq.
    pub order: (i64, i64, i64, i64, i64),
    /// Bytes it adds to a lease reply.
    pub size: i64,
}

impl Candidate {
    /// The ordering key: ascending sorts in lease order.
    pub fn sort_key(&self) -> (i64, i64, i64, i64, i64) {
        let (p, turn, deadline, run_at, seq) = self.order;
        super::model::lease_key(p, turn, Some(deadline), run_at, seq)
    }
}

/// What a gated lease knows of one queue, read under its lock.
#[derive(Debug, Clone, Default)]
pub struct QueueUse {
    pub config: QueueConfig,
    /// Leases held now in the queue.
    pub leased: u64,
    /// Leases held now per concurrency key (keys with none are absent).
    pub leased_per_key: HashMap<String, u64>,
    /// The queue bucket's tokens now (refilled), when it has a rate limit.
    pub tokens: Option<f64>,
    /// Per-key bucket tokens now (refilled); an absent key has a full bucket.
    pub key_tokens: HashMap<String, f64>,
}

impl QueueUse {
    /// How many leases the queue-wide gates allow now, at most `demand`.
    pub fn budget(&self, demand: usize) -> usize {
        let c = &self.config;
        if c.paused {
            return 0;
        }
        let mut n = demand;
        if c.max_concurrent > 0 {
            let free = u64::from(c.max_concurrent).saturating_sub(self.leased);
            n = n.min(usize::try_from(free).unwrap_or(usize::MAX));
        }
        if let Some(t) = self.tokens {
            n = n.min(whole_tokens(t) as usize);
        }
        n
    }

    /// Keys that can take no lease now (full, or out of tokens): the store leaves
    /// their tasks out of the scan, so they never block the keys behind them.
    pub fn closed_keys(&self) -> Vec<String> {
        let c = &self.config;
        let mut out: Vec<String> = Vec::new();
        if c.max_concurrent_per_key > 0 {
            out.extend(
                self.leased_per_key
                    .iter()
                    .filter(|(_, n)| **n >= u64::from(c.max_concurrent_per_key))
                    .map(|(k, _)| k.clone()),
            );
        }
        if c.per_key_rate_limit.is_some() {
            for (k, t) in &self.key_tokens {
                if whole_tokens(*t) < 1.0 && !out.contains(k) {
                    out.push(k.clone());
                }
            }
        }
        out
    }

    /// Whether `key` may take one more lease now, `already` granted in this
    /// lease: under its concurrency limit and with a token in its bucket.
    pub fn key_admits(&self, key: &str, already: u64) -> bool {
        let c = &self.config;
        let held = self.leased_per_key.get(key).copied().unwrap_or(0);
        let full = c.max_concurrent_per_key > 0
            && held.saturating_add(already) >= u64::from(c.max_concurrent_per_key);
        let dry = c.per_key_rate_limit.as_ref().is_some_and(|l| {
            let tokens = self
                .key_tokens
                .get(key)
                .copied()
                .unwrap_or_else(|| l.capacity());
            whole_tokens(tokens - (already as f64)) < 1.0
        });
        !(full || dry)
    }
}

/// The candidates (indexes into `cands`, in their order) a lease may take: at
/// most `budget`, and per key no more than its concurrency limit and its tokens
/// allow, counting what this lease took already (`taken`, per key, updated).
/// Returns the picks and the keys found closed along the way (for the store's
/// next, wider scan).
pub fn admit(
    cands: &[Candidate],
    usage: &QueueUse,
    budget: usize,
    taken: &mut HashMap<String, u64>,
) -> (Vec<usize>, Vec<String>) {
    let mut picks = Vec::new();
    let mut closed: Vec<String> = Vec::new();
    for (i, cand) in cands.iter().enumerate() {
        if picks.len() >= budget {
            break;
        }
        let Some(key) = cand.key.as_deref() else {
            picks.push(i);
            continue;
        };
        let already = taken.get(key).copied().unwrap_or(0);
        if !usage.key_admits(key, already) {
            if !closed.iter().any(|k| k == key) {
                closed.push(key.to_string());
            }
            continue;
        }
        *taken.entry(key.to_string()).or_default() += 1;
        picks.push(i);
    }
    (picks, closed)
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;
