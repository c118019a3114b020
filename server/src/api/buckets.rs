//! Limit buckets and cooldowns: the AdminService calls (Get/List/Update/Delete
//! Bucket, ListCooldowns, LiftCooldown), FailRequest.cooldown, and their
//! conversions.

use tonic::{Request, Response, Status};

use super::admission::{rate_from_pb, rate_to_pb};
use super::convert::{duration, to_timestamp};
use super::error::{invalid, status};
use crate::domain::bucket::{BucketConfig, CooldownAsk, CooldownScope, CooldownTarget};
use crate::domain::validate::Invalid;
use crate::pb;
use crate::service::{Broker, BucketView};
use crate::store::CooldownRecord;

/// FailRequest.cooldown, checked for its shape (the broker checks it against
/// the task and the maximum).
pub(super) fn cooldown_from_pb(c: Option<pb::Cooldown>) -> Result<Option<CooldownAsk>, Invalid> {
    let Some(c) = c else { return Ok(None) };
    let scope = match pb::CooldownScope::try_from(c.scope) {
        Ok(pb::CooldownScope::ConcurrencyKey) => CooldownScope::ConcurrencyKey,
        Ok(pb::CooldownScope::Bucket) => CooldownScope::Bucket,
        Ok(pb::CooldownScope::Unspecified) => {
            return Err(Invalid::new(
                "cooldown.scope",
                "is required (CONCURRENCY_KEY or BUCKET)",
            ));
        }
        Err(_) => {
            return Err(Invalid::new(
                "cooldown.scope",
                format!("{} is not a CooldownScope", c.scope),
            ));
        }
    };
    let Some(d) = duration("cooldown.duration", c.duration.as_ref())? else {
        return Err(Invalid::new("cooldown.duration", "is required"));
    };
    Ok(Some(CooldownAsk { scope, duration: d }))
}

fn bucket_to_pb(b: BucketView) -> pb::LimitBucket {
    pb::LimitBucket {
        name: b.name,
        config: Some(pb::BucketConfig {
            rate_limit: b.config.rate_limit.map(rate_to_pb),
            max_concurrent: b.config.max_concurrent,
        }),
        r#use: Some(pb::BucketUse {
            tokens: b.tokens,
            leases_held: u32::try_from(b.leased).unwrap_or(u32::MAX),
        }),
        update_time: Some(to_timestamp(b.updated_at)),
        cooldown_until: b.cooldown_until.map(to_timestamp),
    }
}

fn cooldown_to_pb(c: CooldownRecord) -> pb::CooldownHold {
    let until = Some(to_timestamp(c.until));
    match c.target {
        CooldownTarget::Key { queue, key } => pb::CooldownHold {
            scope: pb::CooldownScope::ConcurrencyKey as i32,
            queue,
            concurrency_key: key,
            bucket: String::new(),
            until,
            task_id: c.task_id,
        },
        CooldownTarget::Bucket(bucket) => pb::CooldownHold {
            scope: pb::CooldownScope::Bucket as i32,
            queue: String::new(),
            concurrency_key: String::new(),
            bucket,
            until,
            task_id: c.task_id,
        },
    }
}

pub(super) async fn get_bucket(
    broker: &Broker,
    request: Request<pb::GetBucketRequest>,
) -> Result<Response<pb::GetBucketResponse>, Status> {
    let b = broker
        .get_bucket(&request.into_inner().name)
        .await
        .map_err(status)?;
    Ok(Response::new(pb::GetBucketResponse {
        bucket: Some(bucket_to_pb(b)),
    }))
}

pub(super) async fn list_buckets(
    broker: &Broker,
    _request: Request<pb::ListBucketsRequest>,
) -> Result<Response<pb::ListBucketsResponse>, Status> {
    let bs = broker.list_buckets().await.map_err(status)?;
    Ok(Response::new(pb::ListBucketsResponse {
        buckets: bs.into_iter().map(bucket_to_pb).collect(),
    }))
}

pub(super) async fn update_bucket(
    broker: &Broker,
    request: Request<pb::UpdateBucketRequest>,
) -> Result<Response<pb::UpdateBucketResponse>, Status> {
    let r = request.into_inner();
    let paths = r.update_mask.map(|m| m.paths).unwrap_or_default();
    let c = r.config.unwrap_or_default();
    let named = |p: &str| paths.iter().any(|x| x == p);
    let patch = BucketConfig {
        rate_limit: if named("rate_limit") {
            rate_from_pb("config.rate_limit", c.rate_limit).map_err(invalid)?
        } else {
            None
        },
        max_concurrent: c.max_concurrent,
    };
    let b = broker
        .update_bucket(&r.name, &patch, &paths)
        .await
        .map_err(status)?;
    Ok(Response::new(pb::UpdateBucketResponse {
        bucket: Some(bucket_to_pb(b)),
    }))
}

pub(super) async fn delete_bucket(
    broker: &Broker,
    request: Request<pb::DeleteBucketRequest>,
) -> Result<Response<pb::DeleteBucketResponse>, Status> {
    broker
        .delete_bucket(&request.into_inner().name)
        .await
        .map_err(status)?;
    Ok(Response::new(pb::DeleteBucketResponse {}))
}

pub(super) async fn list_cooldowns(
    broker: &Broker,
    request: Request<pb::ListCooldownsRequest>,
) -> Result<Response<pb::ListCooldownsResponse>, Status> {
    let r = request.into_inner();
    let cs = broker
        .list_cooldowns(&r.queue, &r.bucket)
        .await
        .map_err(status)?;
    Ok(Response::new(pb::ListCooldownsResponse {
        cooldowns: cs.into_iter().map(cooldown_to_pb).collect(),
    }))
}

pub(super) async fn lift_cooldown(
    broker: &Broker,
    request: Request<pb::LiftCooldownRequest>,
) -> Result<Response<pb::LiftCooldownResponse>, Status> {
    let r = request.into_inner();
    let lifted = broker
        .lift_cooldown(&r.queue, &r.concurrency_key, &r.bucket)
        .await
        .map_err(status)?;
    Ok(Response::new(pb::LiftCooldownResponse { lifted }))
}
