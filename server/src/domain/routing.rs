//! Routing: which workers may lease a task. Worker labels, targets,
//! sticky reservations of retries and fan-out copies, their validation, and the
//! reservation a failed attempt leaves. Pure: no I/O, `now` passed in.
//!
//! The rules themselves are enforced inside each store's lease statement; this
//! module only says what is stored.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::validate::{Invalid, identifier};

/// Pairs in a worker's labels or a target's labels at most.
pub const MAX_LABELS: usize = 32;
const MAX_LABEL_KEY_LEN: usize = 63;
const MAX_LABEL_VALUE_LEN: usize = 128;
/// Copies of one fan-out task at most (and tasks one Submit may create).
pub const MAX_COPIES: u32 = 1000;
const MAX_WORKER_ID_LEN: usize = 256;
/// A SOFT reservation lasts this long unless the policy says otherwise.
pub const DEFAULT_STICKY_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_STICKY_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Labels: at most 32 pairs, keys `[A-Za-z0-9._/-]{1,63}`, values
/// `[A-Za-z0-9._:/-]{0,128}`. The field in errors is `field.KEY` (or `field`).
pub fn labels(field: &str, labels: &BTreeMap<String, String>) -> Result<(), Invalid> {
    if labels.len() > MAX_LABELS {
        return Err(Invalid::new(
            field,
            format!("holds {} pairs, more than {MAX_LABELS}", labels.len()),
        ));
    }
    let key_ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'/' | b'-');
    let value_ok = |b: u8| key_ok(b) || b == b':';
    for (k, v) in labels {
        if k.is_empty() || k.len() > MAX_LABEL_KEY_LEN || !k.bytes().all(key_ok) {
            return Err(Invalid::new(
                field,
                format!("key {k:?} must be 1 to {MAX_LABEL_KEY_LEN} of A-Z a-z 0-9 . _ / -"),
            ));
        }
        if v.len() > MAX_LABEL_VALUE_LEN || !v.bytes().all(value_ok) {
            return Err(Invalid::new(
                format!("{field}.{k}"),
                format!("must be at most {MAX_LABEL_VALUE_LEN} of A-Z a-z 0-9 . _ : / -"),
            ));
        }
    }
    Ok(())
}

/// Who may lease a task. Empty means anyone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    pub worker_id: Option<String>,
    pub labels: BTreeMap<String, String>,
}

impl Target {
    pub fn validate(&self, field: &str) -> Result<(), Invalid> {
        if let Some(id) = &self.worker_id {
            identifier(&format!("{field}.worker_id"), id, MAX_WORKER_ID_LEN)?;
        }
        labels(&format!("{field}.labels"), &self.labels)
    }

    pub fn is_empty(&self) -> bool {
        self.worker_id.is_none() && self.labels.is_empty()
    }

    /// Whether a worker with this id and these labels may lease the task.
    pub fn admits(&self, worker_id: &str, worker_labels: &BTreeMap<String, String>) -> bool {
        self.worker_id.as_deref().is_none_or(|w| w == worker_id)
            && self
                .labels
                .iter()
                .all(|(k, v)| worker_labels.get(k) == Some(v))
    }
}

/// How a retry is kept for the worker that ran the failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sticky {
    /// Reserved until the timeout passes.
    Soft(Duration),
    /// Reserved until the deadline (or an admin requeue).
    Hard,
}

impl Sticky {
    /// A SOFT policy's timeout: 1 s to 24 h.
    pub fn soft(field: &str, timeout: Option<Duration>) -> Result<Sticky, Invalid> {
        let t = timeout.unwrap_or(DEFAULT_STICKY_TIMEOUT);
        super::validate::duration_in(
            &format!("{field}.timeout"),
            t,
            Duration::from_secs(1),
            MAX_STICKY_TIMEOUT,
        )?;
        Ok(Sticky::Soft(t))
    }

    /// Stored as (`soft`|`hard`, timeout ms).
    pub fn as_str(&self) -> &'static str {
        match self {
            Sticky::Soft(_) => "soft",
            Sticky::Hard => "hard",
        }
    }

    pub fn timeout_ms(&self) -> Option<i64> {
        match self {
            Sticky::Soft(t) => Some(i64::try_from(t.as_millis()).unwrap_or(i64::MAX)),
            Sticky::Hard => None,
        }
    }

    pub fn parse(kind: Option<&str>, timeout_ms: Option<i64>) -> Option<Sticky> {
        match kind? {
            "hard" => Some(Sticky::Hard),
            "soft" => Some(Sticky::Soft(Duration::from_millis(
                u64::try_from(timeout_ms.unwrap_or(0)).unwrap_or(0),
            ))),
            _ => None,
        }
    }
}

/// One task dispatched as several copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fanout {
    pub copies: u32,
    pub distinct_workers: bool,
}

impl Fanout {
    pub fn validate(&self, field: &str) -> Result<(), Invalid> {
        if self.copies == 0 || self.copies > MAX_COPIES {
            return Err(Invalid::new(
                format!("{field}.copies"),
                format!("must be between 1 and {MAX_COPIES}"),
            ));
        }
        Ok(())
    }
}

/// The routing columns of a stored task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskRouting {
    pub target: Target,
    pub sticky: Option<Sticky>,
    /// The first copy's id, for every copy of a fan-out task.
    pub fanout_group: Option<String>,
    /// No worker gets two copies of the group (held or completed).
    pub fanout_distinct: bool,
    /// The worker a retry is reserved for, and until when (`None`: until the
    /// deadline, HARD).
    pub reserved_for: Option<String>,
    pub reserved_until: Option<DateTime<Utc>>,
}

impl TaskRouting {
    /// Whether a lease must apply routing's rules to this task: a target, a
    /// sticky policy, a fan-out group or a reservation. A task without any of
    /// them is leased by any worker of its queue.
    pub fn is_routed(&self) -> bool {
        !self.target.is_empty()
            || self.sticky.is_some()
            || self.fanout_group.is_some()
            || self.reserved_for.is_some()
    }
}

/// The reservation a failed attempt leaves on its retry: with a sticky policy,
/// or when the worker asked (`prefer_same_worker`, SOFT with the default
/// timeout unless the task's own policy says more). `None`: no reservation.
pub fn reservation(
    sticky: Option<Sticky>,
    prefer_same_worker: bool,
    worker_id: &str,
    now: DateTime<Utc>,
) -> Option<(String, Option<DateTime<Utc>>)> {
    let policy = match (sticky, prefer_same_worker) {
        (Some(s), _) => s,
        (None, true) => Sticky::Soft(DEFAULT_STICKY_TIMEOUT),
        (None, false) => return None,
    };
    let until = match policy {
        Sticky::Hard => None,
        Sticky::Soft(t) => {
            Some(now + chrono::Duration::from_std(t).unwrap_or_else(|_| chrono::Duration::days(1)))
        }
    };
    Some((worker_id.to_string(), until))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn labels_are_bounded_and_named_in_errors() {
        assert!(labels("labels", &map(&[("gpu", "a100"), ("region", "eu-west/1")])).is_ok());
        let many: BTreeMap<String, String> =
            (0..33).map(|i| (format!("k{i}"), String::new())).collect();
        assert_eq!(labels("labels", &many).unwrap_err().field, "labels");
        assert_eq!(
            labels("labels", &map(&[("", "x")])).unwrap_err().field,
            "labels"
        );
        assert_eq!(
            labels("labels", &map(&[("gpu", "a 100")]))
                .unwrap_err()
                .field,
            "labels.gpu"
        );
        assert!(labels("labels", &map(&[(&"k".repeat(64), "x")])).is_err());
        assert!(labels("labels", &map(&[("k", &"v".repeat(129))])).is_err());
    }

    #[test]
    fn a_target_admits_by_id_and_by_every_label() {
        let t = Target {
            worker_id: None,
            labels: map(&[("gpu", "a100")]),
        };
        assert!(t.admits("w", &map(&[("gpu", "a100"), ("region", "eu")])));
        assert!(!t.admits("w", &map(&[("gpu", "h100")])));
        assert!(!t.admits("w", &map(&[])));
        let t = Target {
            worker_id: Some("w1".into()),
            labels: BTreeMap::new(),
        };
        assert!(t.admits("w1", &map(&[])));
        assert!(!t.admits("w2", &map(&[])));
    }

    #[test]
    fn copies_are_one_to_a_thousand() {
        let f = |copies| Fanout {
            copies,
            distinct_workers: true,
        };
        assert!(f(1).validate("fanout").is_ok());
        assert!(f(1000).validate("fanout").is_ok());
        assert_eq!(f(0).validate("fanout").unwrap_err().field, "fanout.copies");
        assert!(f(1001).validate("fanout").is_err());
    }

    #[test]
    fn a_failure_reserves_the_retry_as_the_policy_says() {
        let now = DateTime::from_timestamp(1_000, 0).unwrap();
        assert_eq!(reservation(None, false, "w", now), None);
        let (w, until) = reservation(None, true, "w", now).unwrap();
        assert_eq!(w, "w");
        assert_eq!(until, Some(now + chrono::Duration::seconds(30)));
        let soft = Sticky::Soft(Duration::from_secs(5));
        assert_eq!(
            reservation(Some(soft), false, "w", now).unwrap().1,
            Some(now + chrono::Duration::seconds(5))
        );
        assert_eq!(
            reservation(Some(Sticky::Hard), true, "w", now).unwrap().1,
            None
        );
    }
}
