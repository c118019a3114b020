//! Helpers shared by the routing cases, `targeted_task` and `sticky_retry`
//! (clients/conformance/cases/): labels, a lease as a given worker, a Complete.

use std::collections::HashMap;
use std::time::Duration;

use taskbroker_client::Client;
use taskbroker_client::pb;
use taskbroker_client::time::to_proto_duration;

use crate::{Outcome, at};

pub(crate) fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Lease from `queue` as `worker_id` carrying `labels` (30 s leases).
pub(crate) async fn lease_as(
    c: &Client,
    queue: &str,
    worker_id: &str,
    labels: HashMap<String, String>,
    wait: Duration,
) -> Result<Vec<pb::LeasedTask>, String> {
    let req = pb::LeaseRequest {
        worker_id: worker_id.into(),
        queues: vec![queue.into()],
        max_tasks: 10,
        lease_duration: Some(to_proto_duration(Duration::from_secs(30))),
        wait: Some(to_proto_duration(wait)),
        labels,
    };
    at("Lease", c.lease(req).await)
}

pub(crate) async fn complete(c: &Client, t: &pb::LeasedTask) -> Outcome {
    let req = pb::CompleteRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
        result: Vec::new(),
        lease_next: None,
    };
    at("Complete", c.complete(req).await)
}
