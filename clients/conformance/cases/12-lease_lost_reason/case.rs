//! The `lease_lost_reason` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::Duration;

use taskbroker_client::pb;
use taskbroker_client::time::to_proto_duration;
use taskbroker_client::{Client, Error, TaskSpec};

use crate::{Outcome, WORKER_ID, at, check};

pub(crate) async fn lease_lost_reason(c: Client, q: String) -> Outcome {
    at(
        "Submit",
        c.submit(TaskSpec::new(q.clone(), Vec::new())).await,
    )?;
    let tasks = at(
        "Lease",
        c.lease(pb::LeaseRequest {
            labels: Default::default(),
            worker_id: WORKER_ID.into(),
            queues: vec![q],
            max_tasks: 1,
            lease_duration: Some(to_proto_duration(Duration::from_secs(30))),
            wait: None,
        })
        .await,
    )?;
    let t = tasks.first().ok_or("no task leased")?;
    let e = c
        .complete(pb::CompleteRequest {
            task_id: t.task_id.clone(),
            lease_token: "stale".into(),
            result: Vec::new(),
            lease_next: None,
        })
        .await
        .err()
        .ok_or("Complete with a stale token succeeded")?;
    check(e.is_lease_lost(), format!("is_lease_lost false for {e}"))?;
    let bare = Error::from(tonic::Status::aborted("aborted for another reason"));
    check(
        !bare.is_lease_lost(),
        "is_lease_lost true for a bare ABORTED",
    )
}
