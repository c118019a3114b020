//! The `cancel_running` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::Duration;

use taskbroker_client::pb::TaskState;
use taskbroker_client::{Client, TaskSpec};

use crate::{Outcome, at, check, fail_req, heartbeat_req, lease_one, submit};

pub(crate) async fn cancel_running(c: Client, q: String) -> Outcome {
    let id = submit(&c, TaskSpec::new(q.clone(), Vec::new())).await?;
    let t = lease_one(&c, &q, Duration::from_secs(30), Duration::ZERO).await?;
    at("CancelTask", c.cancel_task(&id).await)?;
    let hb = at(
        "Heartbeat",
        c.heartbeat(heartbeat_req(&id, &t.lease_token, None)).await,
    )?;
    check(
        hb.len() == 1 && hb[0].cancel_requested && !hb[0].lost,
        "heartbeat does not say cancel_requested",
    )?;
    let r = at("Fail", c.fail(fail_req(&t, "cancelled", false)).await)?;
    check(
        r.state() == TaskState::Cancelled,
        format!("Fail state {:?}, want CANCELLED", r.state()),
    )
}
