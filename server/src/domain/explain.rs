//! Explain, the pure part: the gates that hold a pending task, from what the
//! service read about it and its queue ([`ExplainView`]). No I/O; `now` is passed in.

use chrono::{DateTime, Utc};

use super::admission::QueueConfig;

/// What holds a task (the proto's `GateKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateKind {
    None,
    RunAtInFuture,
    RetryBackoff,
    BlockedByDependency,
    QueuePaused,
    QueueConcurrencyFull,
    KeyConcurrencyFull,
    RateLimited,
    NoMatchingWorker,
    StickyReserved,
    WaitingBehind,
    BucketConcurrencyFull,
    BucketRateLimited,
    Cooldown,
}

/// One reason a task is held.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    pub kind: GateKind,
    pub detail: String,
    pub until: Option<DateTime<Utc>>,
    pub holders: Vec<String>,
    pub ahead: u64,
    /// BLOCKED_BY_DEPENDENCY: the depends_on_keys no task has yet.
    pub missing_keys: Vec<crate::domain::model::TaskKey>,
    /// BUCKET_* and a bucket's COOLDOWN: the bucket.
    pub bucket: Option<String>,
    /// A key's COOLDOWN: the key.
    pub concurrency_key: Option<String>,
}

impl Gate {
    fn new(kind: GateKind, detail: String) -> Self {
        Gate {
            kind,
            detail,
            until: None,
            holders: Vec::new(),
            ahead: 0,
            missing_keys: Vec::new(),
            bucket: None,
            concurrency_key: None,
        }
    }
}

/// What Explain read about a pending task and its queue.
#[derive(Debug, Clone)]
pub struct ExplainView {
    pub queue: String,
    pub key: Option<String>,
    pub run_at: DateTime<Utc>,
    /// Attempts started so far (a pending task with attempts is in backoff).
    pub attempt: u32,
    pub config: QueueConfig,
    pub leased: u64,
    /// Tasks holding leases of the task's concurrency key.
    pub key_holders: Vec<String>,
    /// Queue bucket tokens now (refilled), with a rate limit.
    pub tokens: Option<f64>,
    /// The key's bucket tokens now (refilled), with a per-key rate limit.
    pub key_tokens: Option<f64>,
    /// READY tasks of the queue that lease before it.
    pub ahead: u64,
    /// Routing: the worker a retry is reserved for, and until when
    /// (`None`: until the deadline), while the reservation holds.
    pub reserved: Option<(String, Option<DateTime<Utc>>)>,
    /// Routing: the task's target, described, when no live worker of
    /// the queue matches it.
    pub unmatched_target: Option<String>,
    /// Limit buckets: the task's bucket, when a defined one applies, and its use now.
    pub bucket: Option<(String, crate::domain::bucket::BucketUse)>,
    /// Cooldowns: the end of a live cooldown of the task's key.
    pub key_cooldown_until: Option<DateTime<Utc>>,
}

/// Every gate that holds a pending task at `now`, or a single NONE. Each gate is
/// one function; gates that other features add (dependencies, routing) join the list.
pub fn explain(v: &ExplainView, now: DateTime<Utc>) -> Vec<Gate> {
    let gates: Vec<Gate> = [
        run_at_gate(v, now),
        paused_gate(v),
        queue_full_gate(v),
        key_full_gate(v),
        rate_gate(v, now),
        key_rate_gate(v, now),
        key_cooldown_gate(v),
        bucket_cooldown_gate(v),
        bucket_full_gate(v),
        bucket_rate_gate(v, now),
        sticky_gate(v),
        no_worker_gate(v),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !gates.is_empty() {
        return gates;
    }
    // Only when nothing else holds it: the tasks that lease first.
    match behind_gate(v, now) {
        Some(g) => vec![g],
        None => vec![Gate::new(
            GateKind::None,
            "a worker asking now would get it".into(),
        )],
    }
}

/// Flow: a BLOCKED task waits for these dependencies (ids, unfinished) and
/// for tasks with these keys, which no task has yet.
pub fn dependency_gate(
    waiting: Vec<String>,
    missing_keys: Vec<crate::domain::model::TaskKey>,
) -> Gate {
    let mut detail = match waiting.as_slice() {
        [] if missing_keys.is_empty() => "it waits for the tasks it depends on".to_owned(),
        [] => String::new(),
        [one] => format!("it waits for task {one} it depends on"),
        many => format!(
            "it waits for {} tasks it depends on: {}",
            many.len(),
            many.join(", ")
        ),
    };
    if !missing_keys.is_empty() {
        let keys: Vec<String> = missing_keys
            .iter()
            .map(|k| format!("{}/{}", k.queue, k.key))
            .collect();
        detail = format!(
            "{detail}{}it waits for a task with key {} (none exists yet)",
            if detail.is_empty() { "" } else { "; " },
            keys.join(", ")
        );
    }
    Gate {
        holders: waiting,
        missing_keys,
        ..Gate::new(GateKind::BlockedByDependency, detail)
    }
}

fn run_at_gate(v: &ExplainView, now: DateTime<Utc>) -> Option<Gate> {
    if v.run_at <= now {
        return None;
    }
    let (kind, detail) = if v.attempt > 0 {
        (
            GateKind::RetryBackoff,
            format!(
                "attempt {} failed; it waits out the retry backoff",
                v.attempt
            ),
        )
    } else {
        (GateKind::RunAtInFuture, "its run_at is still ahead".into())
    };
    Some(Gate {
        until: Some(v.run_at),
        ..Gate::new(kind, detail)
    })
}

fn sticky_gate(v: &ExplainView) -> Option<Gate> {
    let (worker, until) = v.reserved.as_ref()?;
    let detail = match until {
        Some(_) => format!("its retry is reserved for worker {worker} for a while (sticky)"),
        None => format!("its retry is reserved for worker {worker} (sticky, hard)"),
    };
    Some(Gate {
        until: *until,
        ..Gate::new(GateKind::StickyReserved, detail)
    })
}

fn no_worker_gate(v: &ExplainView) -> Option<Gate> {
    let target = v.unmatched_target.as_ref()?;
    Some(Gate::new(
        GateKind::NoMatchingWorker,
        format!("no live worker of queue {} is {target}", v.queue),
    ))
}

fn paused_gate(v: &ExplainView) -> Option<Gate> {
    v.config.paused.then(|| {
        Gate::new(
            GateKind::QueuePaused,
            format!("queue {} is paused", v.queue),
        )
    })
}

fn queue_full_gate(v: &ExplainView) -> Option<Gate> {
    let max = u64::from(v.config.max_concurrent);
    (max > 0 && v.leased >= max).then(|| {
        Gate::new(
            GateKind::QueueConcurrencyFull,
            format!(
                "queue {} holds {} leases, its max_concurrent is {max}",
                v.queue, v.leased
            ),
        )
    })
}

fn key_full_gate(v: &ExplainView) -> Option<Gate> {
    let key = v.key.as_deref()?;
    let max = v.config.max_concurrent_per_key;
    (max > 0 && v.key_holders.len() as u64 >= u64::from(max)).then(|| Gate {
        holders: v.key_holders.clone(),
        ..Gate::new(
            GateKind::KeyConcurrencyFull,
            format!(
                "concurrency key {key} holds {} leases, the queue's max_concurrent_per_key is {max}",
                v.key_holders.len()
            ),
        )
    })
}

fn rate_gate(v: &ExplainView, now: DateTime<Utc>) -> Option<Gate> {
    let limit = v.config.rate_limit?;
    let tokens = v.tokens?;
    (tokens < 1.0).then(|| Gate {
        until: DateTime::from_timestamp_millis(limit.next_token_ms(tokens, now.timestamp_millis())),
        ..Gate::new(
            GateKind::RateLimited,
            format!(
                "queue {} used its rate limit of {}/s",
                v.queue, limit.per_second
            ),
        )
    })
}

fn key_cooldown_gate(v: &ExplainView) -> Option<Gate> {
    let until = v.key_cooldown_until?;
    let key = v.key.clone()?;
    Some(Gate {
        until: Some(until),
        concurrency_key: Some(key.clone()),
        ..Gate::new(
            GateKind::Cooldown,
            format!(
                "a worker put concurrency key {key} in a cooldown until {}",
                until.to_rfc3339()
            ),
        )
    })
}

fn bucket_cooldown_gate(v: &ExplainView) -> Option<Gate> {
    let (name, u) = v.bucket.as_ref()?;
    let until = DateTime::from_timestamp_millis(u.cooldown_until?)?;
    Some(Gate {
        until: Some(until),
        bucket: Some(name.clone()),
        ..Gate::new(
            GateKind::Cooldown,
            format!(
                "a worker put bucket {name} in a cooldown until {}",
                until.to_rfc3339()
            ),
        )
    })
}

fn bucket_full_gate(v: &ExplainView) -> Option<Gate> {
    let (name, u) = v.bucket.as_ref()?;
    let max = u.config.max_concurrent;
    (max > 0 && u.leased >= u64::from(max)).then(|| Gate {
        bucket: Some(name.clone()),
        ..Gate::new(
            GateKind::BucketConcurrencyFull,
            format!("bucket {name} holds its limit of {max} leases"),
        )
    })
}

fn bucket_rate_gate(v: &ExplainView, now: DateTime<Utc>) -> Option<Gate> {
    let (name, u) = v.bucket.as_ref()?;
    let limit = u.config.rate_limit?;
    let tokens = u.tokens?;
    (crate::domain::admission::whole_tokens(tokens) < 1.0).then(|| Gate {
        until: DateTime::from_timestamp_millis(limit.next_token_ms(tokens, now.timestamp_millis())),
        bucket: Some(name.clone()),
        ..Gate::new(
            GateKind::BucketRateLimited,
            format!(
                "bucket {name} used its rate limit of {}/s",
                limit.per_second
            ),
        )
    })
}

fn key_rate_gate(v: &ExplainView, now: DateTime<Utc>) -> Option<Gate> {
    let limit = v.config.per_key_rate_limit?;
    let key = v.key.as_deref()?;
    let tokens = v.key_tokens.unwrap_or_else(|| limit.capacity());
    (tokens < 1.0).then(|| Gate {
        until: DateTime::from_timestamp_millis(limit.next_token_ms(tokens, now.timestamp_millis())),
        ..Gate::new(
            GateKind::RateLimited,
            format!(
                "concurrency key {key} used its rate limit of {}/s",
                limit.per_second
            ),
        )
    })
}

fn behind_gate(v: &ExplainView, now: DateTime<Utc>) -> Option<Gate> {
    (v.run_at <= now && v.ahead > 0).then(|| Gate {
        ahead: v.ahead,
        ..Gate::new(
            GateKind::WaitingBehind,
            format!(
                "{} READY tasks of queue {} lease before it",
                v.ahead, v.queue
            ),
        )
    })
}

/// Which rules a lease applies to a task: the `path` label of the leased-tasks
/// metric, and ExplainTask's `lease_path` for a waiting task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeasePath {
    /// No routing and no gates: any worker of the queue, in lease order.
    Plain,
    /// Routing's rules: a target, a sticky policy or reservation, a fan-out copy.
    Routed,
    /// Its queue has admission gates (pause, limits, fairness, aging); routing's
    /// rules apply within them.
    Gated,
    /// Handed to a waiting long-poll as it was submitted (sync match).
    Matched,
}

impl LeasePath {
    pub fn as_str(self) -> &'static str {
        match self {
            LeasePath::Plain => "plain",
            LeasePath::Routed => "routed",
            LeasePath::Gated => "gated",
            LeasePath::Matched => "matched",
        }
    }
}

/// The path that leases a task taken from its queue: gated when the queue has
/// gates, else routed when the task has routing, else plain.
pub fn lease_path(routing: &crate::domain::routing::TaskRouting, gated: bool) -> LeasePath {
    if gated {
        LeasePath::Gated
    } else if routing.is_routed() {
        LeasePath::Routed
    } else {
        LeasePath::Plain
    }
}

#[cfg(test)]
mod path_tests {
    use super::*;
    use crate::domain::routing::{Sticky, TaskRouting};

    #[test]
    fn the_lease_path_names_the_rules_a_task_needs() {
        let plain = TaskRouting::default();
        assert_eq!(lease_path(&plain, false), LeasePath::Plain);
        assert_eq!(lease_path(&plain, true), LeasePath::Gated);
        let mut targeted = TaskRouting::default();
        targeted.target.worker_id = Some("w1".into());
        assert_eq!(lease_path(&targeted, false), LeasePath::Routed);
        assert_eq!(lease_path(&targeted, true), LeasePath::Gated);
        let reserved = TaskRouting {
            reserved_for: Some("w2".into()),
            ..TaskRouting::default()
        };
        assert_eq!(lease_path(&reserved, false), LeasePath::Routed);
        let sticky = TaskRouting {
            sticky: Some(Sticky::Hard),
            ..TaskRouting::default()
        };
        assert_eq!(lease_path(&sticky, false).as_str(), "routed");
        let copy = TaskRouting {
            fanout_group: Some("t1".into()),
            ..TaskRouting::default()
        };
        assert_eq!(lease_path(&copy, false), LeasePath::Routed);
    }
}
