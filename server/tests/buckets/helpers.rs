//! Helpers of the limit bucket and cooldown tests.
#![allow(dead_code)]

use std::time::Duration;

use taskbroker_client::pb;
use taskbroker_client::pb::admin_service_client::AdminServiceClient;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use tonic::transport::Channel;

use super::common::*;

pub async fn set_bucket(
    admin: &mut AdminServiceClient<Channel>,
    name: &str,
    per_second: f64,
    burst: u32,
    max_concurrent: u32,
) -> pb::LimitBucket {
    let rate_limit = (per_second > 0.0).then_some(pb::RateLimit { per_second, burst });
    admin
        .update_bucket(pb::UpdateBucketRequest {
            name: name.into(),
            config: Some(pb::BucketConfig {
                rate_limit,
                max_concurrent,
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["rate_limit".into(), "max_concurrent".into()],
            }),
        })
        .await
        .expect("update bucket")
        .into_inner()
        .bucket
        .expect("bucket")
}

/// Gives queue `queue` the bucket `bucket` (its tasks that name none use it).
pub async fn queue_bucket(admin: &mut AdminServiceClient<Channel>, queue: &str, bucket: &str) {
    admin
        .update_queue(pb::UpdateQueueRequest {
            name: queue.into(),
            config: Some(pb::QueueConfig {
                bucket: bucket.into(),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["bucket".into()],
            }),
        })
        .await
        .expect("update queue");
}

pub fn in_bucket(queue: &str, bucket: &str) -> pb::TaskSpec {
    pb::TaskSpec {
        bucket: bucket.into(),
        ..spec(queue)
    }
}

pub fn keyed(queue: &str, key: &str) -> pb::TaskSpec {
    pb::TaskSpec {
        concurrency_key: key.into(),
        ..spec(queue)
    }
}

pub fn cooldown(scope: pb::CooldownScope, d: Duration) -> Option<pb::Cooldown> {
    Some(pb::Cooldown {
        scope: scope as i32,
        duration: dur(d),
    })
}

pub async fn fail_with(
    c: &mut BrokerServiceClient<Channel>,
    t: &pb::LeasedTask,
    cd: Option<pb::Cooldown>,
) -> Result<pb::FailResponse, tonic::Status> {
    c.fail(pb::FailRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
        error_message: "429".into(),
        cooldown: cd,
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner())
}

pub async fn complete(c: &mut BrokerServiceClient<Channel>, t: &pb::LeasedTask) {
    c.complete(pb::CompleteRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
        ..Default::default()
    })
    .await
    .expect("complete");
}

pub async fn cooldowns(admin: &mut AdminServiceClient<Channel>) -> Vec<pb::CooldownHold> {
    admin
        .list_cooldowns(pb::ListCooldownsRequest::default())
        .await
        .expect("list cooldowns")
        .into_inner()
        .cooldowns
}

pub async fn explain(admin: &mut AdminServiceClient<Channel>, id: &str) -> Vec<pb::Gate> {
    admin
        .explain_task(pb::ExplainTaskRequest { task_id: id.into() })
        .await
        .expect("explain")
        .into_inner()
        .gates
}

pub fn kind(g: &pb::Gate) -> pb::GateKind {
    pb::GateKind::try_from(g.kind).expect("known kind")
}
