//! The `non_retryable_fail` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::Duration;

use taskbroker_client::pb::TaskState;
use taskbroker_client::{Client, TaskSpec};

use crate::{Outcome, at, check, fail_req, lease_one, submit};

pub(crate) async fn non_retryable_fail(c: Client, q: String) -> Outcome {
    let id = submit(&c, TaskSpec::new(q.clone(), Vec::new())).await?;
    let t = lease_one(&c, &q, Duration::from_secs(30), Duration::ZERO).await?;
    let r = at("Fail", c.fail(fail_req(&t, "bad input", true)).await)?;
    check(
        r.state() == TaskState::Dead,
        format!("Fail state {:?}, want DEAD", r.state()),
    )?;
    let task = at("GetTask", c.get_task(&id).await)?;
    check(
        task.state() == TaskState::Dead,
        format!("task is {:?}, want DEAD", task.state()),
    )?;
    check(
        task.last_error == "bad input",
        format!("last_error {:?}", task.last_error),
    )
}
