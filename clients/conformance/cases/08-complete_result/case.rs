//! The `complete_result` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::Duration;

use taskbroker_client::pb::{self, TaskState};
use taskbroker_client::{Client, TaskSpec};

use crate::{Outcome, at, check, lease_one, submit};

pub(crate) async fn complete_result(c: Client, q: String) -> Outcome {
    let id = submit(&c, TaskSpec::new(q.clone(), Vec::new())).await?;
    let t = lease_one(&c, &q, Duration::from_secs(30), Duration::ZERO).await?;
    let req = pb::CompleteRequest {
        task_id: id.clone(),
        lease_token: t.lease_token,
        result: b"done:42".to_vec(),
        lease_next: None,
    };
    at("Complete", c.complete(req.clone()).await)?;
    at("Complete (repeated)", c.complete(req).await)?;
    let task = at("GetTask", c.get_task(&id).await)?;
    check(
        task.state() == TaskState::Succeeded,
        format!("task is {:?}, want SUCCEEDED", task.state()),
    )?;
    check(task.result == b"done:42", "the result was not stored")
}
