//! Limit buckets and cooldowns, the pure part: a bucket's stored settings,
//! its names, what a cooldown may ask, and how much of a bucket a lease may
//! take now. No I/O; `now` is passed in. The stores keep the rows
//! (`store/buckets.rs`); the gated lease applies them (`store/limits.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::admission::{RateLimit, whole_tokens};
use super::validate::Invalid;

/// The metadata entry that holds a task's bucket (set by the broker from
/// `TaskSpec.bucket`, or else its queue's bucket, at submit; a caller may not
/// set it itself). Only tasks that carry it count against a bucket, so a task
/// without one costs a lease nothing more.
pub const BUCKET_KEY: &str = "taskbroker.bucket";

/// The longest bucket name, in bytes.
pub const MAX_BUCKET_NAME_LEN: usize = 128;

/// The longest cooldown a worker may set unless the configuration says otherwise
/// (a default of the configured limits).
pub use super::validate::DEFAULT_MAX_COOLDOWN;

/// Checks a bucket name: `[A-Za-z0-9._:-]{1,128}`.
pub fn bucket_name(field: &str, name: &str) -> Result<(), Invalid> {
    if name.is_empty() {
        return Err(Invalid::new(field, "is required"));
    }
    if name.len() > MAX_BUCKET_NAME_LEN {
        return Err(Invalid::new(
            field,
            format!("is longer than {MAX_BUCKET_NAME_LEN} characters"),
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    {
        return Err(Invalid::new(field, "may only contain A-Z a-z 0-9 . _ : -"));
    }
    Ok(())
}

/// The bucket a task counts against (from its metadata), if any.
pub fn bucket_of(metadata: &BTreeMap<String, String>) -> Option<&str> {
    metadata
        .get(BUCKET_KEY)
        .map(String::as_str)
        .filter(|b| !b.is_empty())
}

/// A bucket's stored settings (the `limit_buckets.config` JSON).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BucketConfig {
    pub rate_limit: Option<RateLimit>,
    /// Leases its tasks hold at once; 0 = no limit.
    pub max_concurrent: u32,
}

impl BucketConfig {
    /// Checks the settings; the first problem names its field.
    pub fn validate(&self) -> Result<(), Invalid> {
        if let Some(l) = &self.rate_limit
            && !(l.per_second.is_finite() && l.per_second > 0.0 && l.per_second <= 1e6)
        {
            return Err(Invalid::new(
                "config.rate_limit.per_second",
                "must be above 0 and at most 1000000",
            ));
        }
        Ok(())
    }
}

/// What a lease knows of one bucket, read under its lock: the settings, the
/// tokens refilled to now (with a rate limit), the leases its tasks hold, and
/// whether a cooldown holds it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BucketUse {
    pub config: BucketConfig,
    pub tokens: Option<f64>,
    pub leased: u64,
    /// The end of a live cooldown of the bucket (ms), if any.
    pub cooldown_until: Option<i64>,
}

impl BucketUse {
    /// Leases the bucket allows now.
    pub fn budget(&self) -> u64 {
        if self.cooldown_until.is_some() {
            return 0;
        }
        let mut n = u64::MAX;
        if self.config.max_concurrent > 0 {
            n = u64::from(self.config.max_concurrent).saturating_sub(self.leased);
        }
        if let Some(t) = self.tokens {
            n = n.min(whole_tokens(t) as u64);
        }
        n
    }
}

/// What a cooldown holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CooldownScope {
    ConcurrencyKey,
    Bucket,
}

/// A worker's request to hold the leased task's key or bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CooldownAsk {
    pub scope: CooldownScope,
    pub duration: Duration,
}

impl CooldownAsk {
    /// Checks the duration: above zero and at most `max` (a longer one is
    /// refused, not cut short, so a worker learns its Retry-After was not kept).
    pub fn validate(&self, max: Duration) -> Result<(), Invalid> {
        if self.duration.is_zero() {
            return Err(Invalid::new("cooldown.duration", "must be above zero"));
        }
        if self.duration > max {
            return Err(Invalid::new(
                "cooldown.duration",
                format!(
                    "is longer than the broker's max_cooldown ({}s)",
                    max.as_secs()
                ),
            ));
        }
        Ok(())
    }
}

/// Which key or bucket a cooldown holds: `(queue, key)` for a key (keys are
/// per queue), or a bucket; the stored row keeps the other part empty.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CooldownTarget {
    Key { queue: String, key: String },
    Bucket(String),
}

impl CooldownTarget {
    /// The row's (queue, key, bucket) columns.
    pub fn columns(&self) -> (&str, &str, &str) {
        match self {
            CooldownTarget::Key { queue, key } => (queue, key, ""),
            CooldownTarget::Bucket(b) => ("", "", b),
        }
    }

    /// From the row's columns: a bucket when `bucket` is set.
    pub fn from_columns(queue: String, key: String, bucket: String) -> Self {
        if bucket.is_empty() {
            CooldownTarget::Key { queue, key }
        } else {
            CooldownTarget::Bucket(bucket)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cooldown_is_above_zero_and_at_most_the_maximum() {
        let max = Duration::from_secs(60);
        let ask = |s| CooldownAsk {
            scope: CooldownScope::Bucket,
            duration: Duration::from_secs(s),
        };
        assert!(ask(0).validate(max).is_err());
        assert!(ask(61).validate(max).is_err());
        assert!(ask(60).validate(max).is_ok());
    }

    #[test]
    fn a_bucket_budget_is_its_tokens_and_room_and_nothing_while_cooling() {
        let mut u = BucketUse {
            config: BucketConfig {
                rate_limit: Some(RateLimit {
                    per_second: 20.0,
                    burst: 20,
                }),
                max_concurrent: 5,
            },
            tokens: Some(7.5),
            leased: 2,
            cooldown_until: None,
        };
        assert_eq!(u.budget(), 3);
        u.leased = 0;
        assert_eq!(u.budget(), 5);
        u.config.max_concurrent = 0;
        assert_eq!(u.budget(), 7);
        u.cooldown_until = Some(1);
        assert_eq!(u.budget(), 0);
    }

    #[test]
    fn bucket_names_are_bounded() {
        assert!(bucket_name("b", &"a".repeat(128)).is_ok());
        assert!(bucket_name("b", &"a".repeat(129)).is_err());
        assert!(bucket_name("b", "").is_err());
        assert!(bucket_name("b", "a b").is_err());
    }
}
