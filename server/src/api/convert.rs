//! Conversions between protobuf messages and service types. Conversions from
//! the wire are checked and name the field they reject.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::domain::validate::Invalid;
use crate::domain::{AttemptOutcome, RetryPolicy, StoredState, TaskState};
use crate::pb;
use crate::store::{AttemptRecord, QueueStatsRecord, TaskRecord};

/// A protobuf Duration as a non-negative std Duration.
pub fn duration(
    field: &str,
    d: Option<&prost_types::Duration>,
) -> Result<Option<Duration>, Invalid> {
    let Some(d) = d else { return Ok(None) };
    if d.seconds < 0 || d.nanos < 0 || d.nanos >= 1_000_000_000 {
        return Err(Invalid::new(field, "must be a non-negative duration"));
    }
    Ok(Some(Duration::new(d.seconds as u64, d.nanos as u32)))
}

/// A protobuf Timestamp inside the range the broker stores (years 1 to 9999).
pub fn timestamp(
    field: &str,
    t: Option<&prost_types::Timestamp>,
) -> Result<Option<DateTime<Utc>>, Invalid> {
    let Some(t) = t else { return Ok(None) };
    const MIN: i64 = -62_135_596_800; // 0001-01-01
    const MAX: i64 = 253_402_300_799; // 9999-12-31
    if !(MIN..=MAX).contains(&t.seconds) || !(0..1_000_000_000).contains(&t.nanos) {
        return Err(Invalid::new(field, "is not a valid timestamp"));
    }
    DateTime::from_timestamp(t.seconds, t.nanos as u32)
        .map(Some)
        .ok_or_else(|| Invalid::new(field, "is not a valid timestamp"))
}

pub fn to_timestamp(t: DateTime<Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: t.timestamp(),
        nanos: t.timestamp_subsec_nanos() as i32,
    }
}

pub fn to_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: d.subsec_nanos() as i32,
    }
}

pub fn state_to_pb(s: TaskState) -> pb::TaskState {
    match s {
        TaskState::Scheduled => pb::TaskState::Scheduled,
        TaskState::Ready => pb::TaskState::Ready,
        TaskState::Leased => pb::TaskState::Leased,
        TaskState::Succeeded => pb::TaskState::Succeeded,
        TaskState::Dead => pb::TaskState::Dead,
        TaskState::Cancelled => pb::TaskState::Cancelled,
        TaskState::Blocked => pb::TaskState::Blocked,
    }
}

pub fn state_from_pb(field: &str, v: i32) -> Result<TaskState, Invalid> {
    Ok(match pb::TaskState::try_from(v) {
        Ok(pb::TaskState::Scheduled) => TaskState::Scheduled,
        Ok(pb::TaskState::Ready) => TaskState::Ready,
        Ok(pb::TaskState::Leased) => TaskState::Leased,
        Ok(pb::TaskState::Succeeded) => TaskState::Succeeded,
        Ok(pb::TaskState::Dead) => TaskState::Dead,
        Ok(pb::TaskState::Cancelled) => TaskState::Cancelled,
        Ok(pb::TaskState::Blocked) => TaskState::Blocked,
        _ => return Err(Invalid::new(field, format!("{v} is not a task state"))),
    })
}

fn outcome_to_pb(o: AttemptOutcome) -> pb::AttemptOutcome {
    match o {
        AttemptOutcome::Running => pb::AttemptOutcome::Running,
        AttemptOutcome::Succeeded => pb::AttemptOutcome::Succeeded,
        AttemptOutcome::Failed => pb::AttemptOutcome::Failed,
        AttemptOutcome::LeaseExpired => pb::AttemptOutcome::LeaseExpired,
        AttemptOutcome::DeadlineExceeded => pb::AttemptOutcome::DeadlineExceeded,
    }
}

pub fn retry_to_pb(r: &RetryPolicy) -> pb::RetryPolicy {
    pb::RetryPolicy {
        max_attempts: r.max_attempts,
        initial_backoff: Some(to_duration(r.initial_backoff)),
        backoff_multiplier: r.backoff_multiplier,
        max_backoff: Some(to_duration(r.max_backoff)),
        jitter: Some(r.jitter),
        schedule: Vec::new(),
    }
}

pub fn leased_task(t: TaskRecord) -> pb::LeasedTask {
    let at_most_once = crate::service::is_at_most_once(&t.metadata);
    pb::LeasedTask {
        task_id: t.id,
        queue: t.queue,
        payload: t.payload,
        key: t.key.unwrap_or_default(),
        priority: t.priority,
        deadline: t.deadline.map(to_timestamp),
        metadata: t.metadata.into_iter().collect(),
        attempt: t.attempt,
        lease_token: t.lease_token.unwrap_or_default(),
        fencing_token: t.fencing_token,
        lease_expires_at: t.lease_expires_at.map(to_timestamp),
        has_checkpoint: t.checkpoint.is_some(),
        checkpoint: t.checkpoint.unwrap_or_default(),
        max_attempts: t.attempts_allowed,
        created_at: Some(to_timestamp(t.created_at)),
        fanout_group: t.routing.fanout_group.unwrap_or_default(),
        concurrency_key: t.concurrency_key.unwrap_or_default(),
        dependency_results: t.dependency_results.into_iter().collect(),
        at_most_once,
    }
}

pub fn task(t: TaskRecord, now: DateTime<Utc>) -> pb::Task {
    let at_most_once = crate::service::is_at_most_once(&t.metadata);
    let state = TaskState::of(t.state, t.run_at, now);
    let leased = t.state == StoredState::Leased;
    let bucket = crate::domain::bucket::bucket_of(&t.metadata)
        .unwrap_or_default()
        .to_string();
    pb::Task {
        bucket,
        id: t.id,
        queue: t.queue,
        payload: t.payload,
        key: t.key.unwrap_or_default(),
        priority: t.priority,
        run_at: Some(to_timestamp(t.run_at)),
        deadline: t.deadline.map(to_timestamp),
        retry: Some(pb::RetryPolicy {
            schedule: t.retry_schedule.iter().copied().map(to_duration).collect(),
            ..retry_to_pb(&t.retry)
        }),
        metadata: t.metadata.into_iter().collect(),
        state: state_to_pb(state) as i32,
        attempt: t.attempt,
        // The attempts the task may make in all (what a lease reports too): the retry
        // policy's max_attempts, plus max_attempts more for each requeue.
        max_attempts: t.attempts_allowed,
        created_at: Some(to_timestamp(t.created_at)),
        updated_at: Some(to_timestamp(t.updated_at)),
        last_error: t.last_error.unwrap_or_default(),
        has_checkpoint: t.checkpoint.is_some(),
        checkpoint: t.checkpoint.unwrap_or_default(),
        result: t.result.unwrap_or_default(),
        leased_by: t.leased_by.unwrap_or_default(),
        lease_expires_at: if leased {
            t.lease_expires_at.map(to_timestamp)
        } else {
            None
        },
        finished_at: t.finished_at.map(to_timestamp),
        cancel_requested: t.cancel_requested,
        fencing_token: t.fencing_token,
        schedule_id: t.schedule_id.unwrap_or_default(),
        fire_time: t.fire_time.map(to_timestamp),
        target: (!t.routing.target.is_empty()).then(|| target_to_pb(&t.routing.target)),
        sticky: t.routing.sticky.map(sticky_to_pb),
        fanout_group: t.routing.fanout_group.unwrap_or_default(),
        reserved_for: t.routing.reserved_for.unwrap_or_default(),
        // Flow.
        depends_on: Vec::new(),
        dependencies_remaining: 0,
        run_if_dependency_fails: false,
        cancel_reason: 0,
        concurrency_key: t.concurrency_key.unwrap_or_default(),
        depends_on_keys: Vec::new(),
        at_most_once,
    }
}

pub fn attempt(a: AttemptRecord) -> pb::Attempt {
    pb::Attempt {
        attempt: a.attempt,
        worker_id: a.worker_id,
        worker_address: a.worker_address,
        leased_at: Some(to_timestamp(a.leased_at)),
        finished_at: a.finished_at.map(to_timestamp),
        outcome: outcome_to_pb(a.outcome) as i32,
        error: a.error.unwrap_or_default(),
        fencing_token: a.fencing_token,
    }
}

pub fn queue_stats(s: QueueStatsRecord, now: DateTime<Utc>) -> pb::QueueStats {
    let age = s
        .oldest_ready_at
        .and_then(|t| (now - t).to_std().ok())
        .unwrap_or_default();
    pb::QueueStats {
        queue: s.queue,
        scheduled: s.scheduled,
        ready: s.ready,
        leased: s.leased,
        succeeded: s.succeeded,
        dead: s.dead,
        cancelled: s.cancelled,
        oldest_ready_age: Some(to_duration(age)),
        completed_last_minute: s.completed_last_minute,
        failed_last_minute: s.failed_last_minute,
    }
}

/// The time left of the call's `grpc-timeout`, if the client set one.
pub fn grpc_timeout(meta: &tonic::metadata::MetadataMap) -> Option<Duration> {
    parse_grpc_timeout(meta.get("grpc-timeout")?.to_str().ok()?)
}

/// A `grpc-timeout` header value (`100m`, `2S`) as a duration.
pub fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    if v.len() < 2 {
        return None;
    }
    let (num, unit) = v.split_at(v.len() - 1);
    let n: u64 = num.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

// ---- Routing ----

pub fn target_from_pb(t: pb::Target) -> crate::domain::routing::Target {
    crate::domain::routing::Target {
        worker_id: (!t.worker_id.is_empty()).then_some(t.worker_id),
        labels: t.labels.into_iter().collect(),
    }
}

pub(super) fn target_to_pb(t: &crate::domain::routing::Target) -> pb::Target {
    pb::Target {
        worker_id: t.worker_id.clone().unwrap_or_default(),
        labels: t.labels.clone().into_iter().collect(),
    }
}

/// A sticky policy as submitted; UNSPECIFIED means none.
pub fn sticky_from_pb(
    field: &str,
    s: Option<&pb::StickyPolicy>,
) -> Result<Option<crate::service::StickySpec>, Invalid> {
    use crate::service::StickySpec;
    let Some(s) = s else {
        return Ok(None);
    };
    let timeout = duration(&format!("{field}.timeout"), s.timeout.as_ref())?;
    match pb::StickyStrategy::try_from(s.strategy) {
        Ok(pb::StickyStrategy::Unspecified) => Ok(None),
        Ok(pb::StickyStrategy::Soft) => Ok(Some(StickySpec::Soft { timeout })),
        Ok(pb::StickyStrategy::Hard) => Ok(Some(StickySpec::Hard)),
        Err(_) => Err(Invalid::new(
            format!("{field}.strategy"),
            "must be STICKY_STRATEGY_SOFT or STICKY_STRATEGY_HARD",
        )),
    }
}

pub(super) fn sticky_to_pb(s: crate::domain::routing::Sticky) -> pb::StickyPolicy {
    use crate::domain::routing::Sticky;
    match s {
        Sticky::Soft(t) => pb::StickyPolicy {
            strategy: pb::StickyStrategy::Soft as i32,
            timeout: Some(to_duration(t)),
        },
        Sticky::Hard => pb::StickyPolicy {
            strategy: pb::StickyStrategy::Hard as i32,
            timeout: None,
        },
    }
}

pub fn worker(w: crate::store::WorkerRecord) -> pb::Worker {
    pb::Worker {
        worker_id: w.worker_id,
        labels: w.labels.into_iter().collect(),
        address: w.address,
        queues: w.queues,
        first_seen: Some(to_timestamp(w.first_seen)),
        last_seen: Some(to_timestamp(w.last_seen)),
        leases_held: w.leases_held,
        completed_last_minute: w.completed_last_minute,
        failed_last_minute: w.failed_last_minute,
    }
}

pub fn worker_lease(l: crate::store::WorkerLeaseRecord) -> pb::WorkerLease {
    pb::WorkerLease {
        task_id: l.task_id,
        queue: l.queue,
        attempt: l.attempt,
        leased_at: l.leased_at.map(to_timestamp),
        lease_expires_at: l.lease_expires_at.map(to_timestamp),
    }
}

#[cfg(test)]
#[path = "reply_bound_tests.rs"]
mod reply_bound_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_durations_are_rejected_with_their_field() {
        let d = prost_types::Duration {
            seconds: -1,
            nanos: 0,
        };
        assert_eq!(duration("wait", Some(&d)).unwrap_err().field, "wait");
        assert_eq!(duration("wait", None).unwrap(), None);
    }

    #[test]
    fn absurd_timestamps_are_rejected() {
        let t = prost_types::Timestamp {
            seconds: i64::MAX,
            nanos: 0,
        };
        assert!(timestamp("run_at", Some(&t)).is_err());
        let t = prost_types::Timestamp {
            seconds: 0,
            nanos: -5,
        };
        assert!(timestamp("run_at", Some(&t)).is_err());
    }

    #[test]
    fn grpc_timeout_units_parse() {
        let mut m = tonic::metadata::MetadataMap::new();
        m.insert("grpc-timeout", "1500m".parse().unwrap());
        assert_eq!(grpc_timeout(&m), Some(Duration::from_millis(1500)));
        m.insert("grpc-timeout", "2S".parse().unwrap());
        assert_eq!(grpc_timeout(&m), Some(Duration::from_secs(2)));
        m.insert("grpc-timeout", "x".parse().unwrap());
        assert_eq!(grpc_timeout(&m), None);
    }
}
