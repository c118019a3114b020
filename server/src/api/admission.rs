//! Admission: the AdminService calls on live queue settings
//! (GetQueue, ListQueues, UpdateQueue) and ExplainTask, and their conversions.

use std::time::Duration;

use tonic::{Request, Response, Status};

use super::convert::{duration, retry_to_pb, state_to_pb, to_duration, to_timestamp};
use super::error::{invalid, status};
use crate::domain::admission::{Fairness, QueueConfig, RateLimit, RetryOverride};
use crate::domain::explain::{self, GateKind};
use crate::domain::validate::Invalid;
use crate::pb;
use crate::service::{Broker, QueueView};

pub(super) async fn get_queue(
    broker: &Broker,
    request: Request<pb::GetQueueRequest>,
) -> Result<Response<pb::GetQueueResponse>, Status> {
    let name = request.into_inner().name;
    let q = broker.get_queue(&name).await.map_err(status)?;
    Ok(Response::new(pb::GetQueueResponse {
        queue: Some(queue_to_pb(q)),
    }))
}

pub(super) async fn list_queues(
    broker: &Broker,
    _request: Request<pb::ListQueuesRequest>,
) -> Result<Response<pb::ListQueuesResponse>, Status> {
    let qs = broker.list_queues().await.map_err(status)?;
    Ok(Response::new(pb::ListQueuesResponse {
        queues: qs.into_iter().map(queue_to_pb).collect(),
    }))
}

pub(super) async fn update_queue(
    broker: &Broker,
    request: Request<pb::UpdateQueueRequest>,
) -> Result<Response<pb::UpdateQueueResponse>, Status> {
    let r = request.into_inner();
    let paths = r.update_mask.map(|m| m.paths).unwrap_or_default();
    let patch = config_from_pb(r.config.unwrap_or_default(), &paths).map_err(invalid)?;
    let q = broker
        .update_queue(&r.name, &patch, &paths)
        .await
        .map_err(status)?;
    Ok(Response::new(pb::UpdateQueueResponse {
        queue: Some(queue_to_pb(q)),
    }))
}

pub(super) async fn explain_task(
    broker: &Broker,
    request: Request<pb::ExplainTaskRequest>,
) -> Result<Response<pb::ExplainTaskResponse>, Status> {
    let task_id = request.into_inner().task_id;
    let e = broker.explain_task(&task_id).await.map_err(status)?;
    Ok(Response::new(pb::ExplainTaskResponse {
        task_id: e.task_id,
        state: state_to_pb(e.state) as i32,
        gates: e.gates.into_iter().map(gate_to_pb).collect(),
        lease_path: e.lease_path.map_or(pb::LeasePath::Unspecified, path_to_pb) as i32,
    }))
}

fn path_to_pb(p: explain::LeasePath) -> pb::LeasePath {
    match p {
        explain::LeasePath::Plain => pb::LeasePath::Plain,
        explain::LeasePath::Routed => pb::LeasePath::Routed,
        explain::LeasePath::Gated => pb::LeasePath::Gated,
        explain::LeasePath::Matched => pb::LeasePath::Matched,
    }
}

fn gate_to_pb(g: explain::Gate) -> pb::Gate {
    let kind = match g.kind {
        GateKind::None => pb::GateKind::None,
        GateKind::RunAtInFuture => pb::GateKind::RunAtInFuture,
        GateKind::RetryBackoff => pb::GateKind::RetryBackoff,
        GateKind::BlockedByDependency => pb::GateKind::BlockedByDependency,
        GateKind::QueuePaused => pb::GateKind::QueuePaused,
        GateKind::QueueConcurrencyFull => pb::GateKind::QueueConcurrencyFull,
        GateKind::KeyConcurrencyFull => pb::GateKind::KeyConcurrencyFull,
        GateKind::RateLimited => pb::GateKind::RateLimited,
        GateKind::NoMatchingWorker => pb::GateKind::NoMatchingWorker,
        GateKind::StickyReserved => pb::GateKind::StickyReserved,
        GateKind::WaitingBehind => pb::GateKind::WaitingBehind,
        GateKind::BucketConcurrencyFull => pb::GateKind::BucketConcurrencyFull,
        GateKind::BucketRateLimited => pb::GateKind::BucketRateLimited,
        GateKind::Cooldown => pb::GateKind::Cooldown,
    };
    pb::Gate {
        kind: kind as i32,
        detail: g.detail,
        until: g.until.map(to_timestamp),
        holder_task_ids: g.holders,
        ahead: g.ahead,
        missing_keys: g
            .missing_keys
            .into_iter()
            .map(|k| pb::TaskKey {
                queue: k.queue,
                key: k.key,
            })
            .collect(),
        bucket: g.bucket.unwrap_or_default(),
        concurrency_key: g.concurrency_key.unwrap_or_default(),
    }
}

pub(super) fn rate_to_pb(r: RateLimit) -> pb::RateLimit {
    pb::RateLimit {
        per_second: r.per_second,
        burst: u32::try_from(r.capacity() as u64).unwrap_or(u32::MAX),
    }
}

/// A queue with every field at its effective value.
fn queue_to_pb(q: QueueView) -> pb::Queue {
    let l = q.live;
    let c = &l.config;
    let s = &l.settings;
    pb::Queue {
        name: q.name,
        config: Some(pb::QueueConfig {
            paused: c.paused,
            max_concurrent: c.max_concurrent,
            rate_limit: c.rate_limit.map(rate_to_pb),
            max_concurrent_per_key: c.max_concurrent_per_key,
            per_key_rate_limit: c.per_key_rate_limit.map(rate_to_pb),
            fairness: match c.fairness {
                Fairness::None => pb::Fairness::None,
                Fairness::RoundRobinKeys => pb::Fairness::RoundRobinKeys,
            } as i32,
            priority_aging: c
                .aging_ms()
                .map(|a| to_duration(Duration::from_millis(a as u64))),
            max_leases_per_worker: c.max_leases_per_worker,
            default_retry: Some(retry_to_pb(&s.retry)),
            default_lease: Some(to_duration(l.default_lease)),
            max_lease: Some(to_duration(s.max_lease)),
            max_payload_bytes: s.max_payload_bytes as u64,
            retention: Some(to_duration(s.retention)),
            min_lease: Some(to_duration(s.min_lease)),
            max_pending: c.max_pending,
            max_pending_bytes: c.max_pending_bytes,
            bucket: c.bucket.clone().unwrap_or_default(),
            payload_schema: c.payload_schema.clone().unwrap_or_default(),
        }),
        update_time: l.updated_at.map(to_timestamp),
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A named duration: unset or zero means "back to the default".
fn opt_ms(field: &str, d: Option<&prost_types::Duration>) -> Result<Option<u64>, Invalid> {
    Ok(duration(field, d)?.filter(|d| !d.is_zero()).map(ms))
}

pub(super) fn rate_from_pb(
    field: &str,
    r: Option<pb::RateLimit>,
) -> Result<Option<RateLimit>, Invalid> {
    let Some(r) = r else { return Ok(None) };
    if !(r.per_second.is_finite() && r.per_second > 0.0 && r.per_second <= 1e6) {
        return Err(Invalid::new(
            format!("{field}.per_second"),
            "must be above 0 and at most 1000000",
        ));
    }
    Ok(Some(RateLimit {
        per_second: r.per_second,
        burst: r.burst,
    }))
}

/// The values of an update, checked where the mask names them (a field not
/// named is not read). Zero or unset means "back to the broker's default".
fn config_from_pb(c: pb::QueueConfig, paths: &[String]) -> Result<QueueConfig, Invalid> {
    let named = |p: &str| {
        paths
            .iter()
            .any(|x| x == p || x.starts_with(&format!("{p}.")))
    };
    let fairness = if named("fairness") {
        match pb::Fairness::try_from(c.fairness) {
            Ok(pb::Fairness::RoundRobinKeys) => Fairness::RoundRobinKeys,
            Ok(_) => Fairness::None,
            Err(_) => {
                return Err(Invalid::new(
                    "config.fairness",
                    format!("{} is not a Fairness value", c.fairness),
                ));
            }
        }
    } else {
        Fairness::None
    };
    let retry = c.default_retry.unwrap_or_default();
    Ok(QueueConfig {
        paused: c.paused,
        max_concurrent: c.max_concurrent,
        rate_limit: if named("rate_limit") {
            rate_from_pb("config.rate_limit", c.rate_limit)?
        } else {
            None
        },
        max_concurrent_per_key: c.max_concurrent_per_key,
        per_key_rate_limit: if named("per_key_rate_limit") {
            rate_from_pb("config.per_key_rate_limit", c.per_key_rate_limit)?
        } else {
            None
        },
        fairness,
        priority_aging_ms: opt_ms("config.priority_aging", c.priority_aging.as_ref())?,
        max_leases_per_worker: c.max_leases_per_worker,
        retry: RetryOverride {
            max_attempts: (retry.max_attempts > 0).then_some(retry.max_attempts),
            initial_backoff_ms: duration(
                "config.default_retry.initial_backoff",
                retry.initial_backoff.as_ref(),
            )?
            .map(ms),
            backoff_multiplier: (retry.backoff_multiplier != 0.0)
                .then_some(retry.backoff_multiplier),
            max_backoff_ms: opt_ms(
                "config.default_retry.max_backoff",
                retry.max_backoff.as_ref(),
            )?,
            jitter: retry.jitter,
        },
        default_lease_ms: opt_ms("config.default_lease", c.default_lease.as_ref())?,
        min_lease_ms: opt_ms("config.min_lease", c.min_lease.as_ref())?,
        max_lease_ms: opt_ms("config.max_lease", c.max_lease.as_ref())?,
        max_payload_bytes: (c.max_payload_bytes > 0).then_some(c.max_payload_bytes),
        // Zero keeps finished tasks for good; unset means the broker's default.
        retention_ms: duration("config.retention", c.retention.as_ref())?.map(ms),
        max_pending: c.max_pending,
        max_pending_bytes: c.max_pending_bytes,
        bucket: if named("bucket") && !c.bucket.is_empty() {
            crate::domain::bucket::bucket_name("config.bucket", &c.bucket)?;
            Some(c.bucket)
        } else {
            None
        },
        // Checked by the service (`update_queue`), for the console's edits too.
        payload_schema: if named("payload_schema") && !c.payload_schema.is_empty() {
            Some(c.payload_schema)
        } else {
            None
        },
    })
}
