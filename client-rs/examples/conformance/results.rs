//! The Complete shared by the cases on results, `dependency_results`, `keys_and_replace`,
//! `submit_backpressure` and `dead_result` (clients/conformance/cases/).

use taskbroker_client::Client;
use taskbroker_client::pb;

use crate::{Outcome, at};

pub(crate) async fn complete(c: &Client, t: &pb::LeasedTask, result: &[u8]) -> Outcome {
    let req = pb::CompleteRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
        result: result.to_vec(),
        lease_next: None,
    };
    at("Complete", c.complete(req).await).map(|_| ())
}
