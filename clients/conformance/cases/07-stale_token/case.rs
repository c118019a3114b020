//! The `stale_token` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::Duration;

use taskbroker_client::pb::{self, TaskState};
use taskbroker_client::{Client, TaskSpec};

use crate::{Outcome, at, check, lease_one, submit};

pub(crate) async fn stale_token(c: Client, q: String) -> Outcome {
    let id = submit(&c, TaskSpec::new(q.clone(), Vec::new())).await?;
    lease_one(&c, &q, Duration::from_secs(30), Duration::ZERO).await?;
    let req = pb::CompleteRequest {
        task_id: id.clone(),
        lease_token: "stale".into(),
        result: Vec::new(),
        lease_next: None,
    };
    match c.complete(req).await {
        Ok(()) => return Err("Complete with a stale token succeeded".into()),
        Err(e) => {
            check(
                e.code() == Some(tonic::Code::Aborted),
                format!("got {e}, want ABORTED"),
            )?;
            check(
                e.is_lease_lost(),
                format!(
                    "reason {:?}, want LEASE_LOST in domain taskbroker.dev",
                    e.reason()
                ),
            )?;
        }
    }
    let task = at("GetTask", c.get_task(&id).await)?;
    check(
        task.state() == TaskState::Leased,
        format!("task is {:?}, want LEASED", task.state()),
    )
}
