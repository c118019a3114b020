//! The `retryable_fail` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::Duration;

use taskbroker_client::pb::TaskState;
use taskbroker_client::{Client, TaskSpec};

use crate::{Outcome, at, check, fail_req, lease_one, submit};

pub(crate) async fn retryable_fail(c: Client, q: String) -> Outcome {
    submit(
        &c,
        TaskSpec::new(q.clone(), Vec::new())
            .max_attempts(3)
            .initial_backoff(Duration::ZERO),
    )
    .await?;
    let t = lease_one(&c, &q, Duration::from_secs(30), Duration::ZERO).await?;
    let r = at("Fail", c.fail(fail_req(&t, "boom", false)).await)?;
    check(
        r.state() == TaskState::Ready || r.state() == TaskState::Scheduled,
        format!("Fail state {:?}, want READY or SCHEDULED", r.state()),
    )?;
    check(r.next_run_at.is_some(), "next_run_at is not set")?;
    let again = lease_one(&c, &q, Duration::from_secs(30), Duration::from_secs(5)).await?;
    check(
        again.task_id == t.task_id && again.attempt == 2,
        format!("attempt {}, want 2", again.attempt),
    )
}
