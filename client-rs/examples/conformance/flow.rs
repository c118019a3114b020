//! Helpers shared by the flow cases, `dependency` and `wait_by_stream`
//! (clients/conformance/cases/): a lease on the generated stub, its payloads, a Complete.

use std::time::Duration;

use taskbroker_client::Client;
use taskbroker_client::pb;
use taskbroker_client::time::to_proto_duration;

use crate::{Outcome, WORKER_ID, at};

pub(crate) async fn lease(
    c: &Client,
    queue: &str,
    n: u32,
    wait: Duration,
) -> Result<Vec<pb::LeasedTask>, String> {
    let req = pb::LeaseRequest {
        worker_id: WORKER_ID.into(),
        queues: vec![queue.into()],
        max_tasks: n,
        lease_duration: Some(to_proto_duration(Duration::from_secs(30))),
        wait: Some(to_proto_duration(wait)),
        labels: Default::default(),
    };
    at("Lease", c.lease(req).await)
}

pub(crate) fn payloads(tasks: &[pb::LeasedTask]) -> Vec<String> {
    tasks
        .iter()
        .map(|t| String::from_utf8_lossy(&t.payload).into_owned())
        .collect()
}

pub(crate) async fn complete(c: &Client, t: &pb::LeasedTask, result: &str) -> Outcome {
    let req = pb::CompleteRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
        result: result.as_bytes().to_vec(),
        lease_next: None,
    };
    at("Complete", c.complete(req).await).map(|_| ())
}
