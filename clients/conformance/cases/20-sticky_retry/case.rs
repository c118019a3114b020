//! The `sticky_retry` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::collections::HashMap;
use std::time::Duration;

use taskbroker_client::pb::{self, TaskState};
use taskbroker_client::{Client, Sticky, TaskSpec};

use crate::routing::{complete, lease_as};
use crate::{Outcome, WORKER_ID, at, check};

pub(crate) async fn sticky_retry(c: Client, q: String) -> Outcome {
    let spec = TaskSpec::new(q.clone(), "s")
        .max_attempts(3)
        .initial_backoff(Duration::ZERO)
        .sticky(Sticky::Soft(Duration::from_secs(60)));
    at("Submit", c.submit(spec).await)?;
    let zero = Duration::ZERO;
    let got = lease_as(&c, &q, WORKER_ID, HashMap::new(), zero).await?;
    check(
        got.len() == 1,
        format!("leased {} tasks, want 1", got.len()),
    )?;
    let req = pb::FailRequest {
        task_id: got[0].task_id.clone(),
        lease_token: got[0].lease_token.clone(),
        error_message: "boom".into(),
        non_retryable: false,
        retry_after: None,
        prefer_same_worker: false,
        lease_next: None,
        cooldown: None,
    };
    let failed = at("Fail", c.fail(req).await)?;
    check(
        failed.state == TaskState::Ready as i32 || failed.state == TaskState::Scheduled as i32,
        format!("Fail left state {}, want READY or SCHEDULED", failed.state),
    )?;
    let other = format!("{WORKER_ID}-other");
    let got = lease_as(&c, &q, &other, HashMap::new(), zero).await?;
    check(
        got.is_empty(),
        format!("{other} leased the retry reserved for {WORKER_ID}"),
    )?;
    let got = lease_as(&c, &q, WORKER_ID, HashMap::new(), Duration::from_secs(5)).await?;
    check(
        got.len() == 1 && got[0].attempt == 2,
        format!(
            "{WORKER_ID} leased {} tasks (attempts {:?}), want the retry with attempt 2",
            got.len(),
            got.iter().map(|t| t.attempt).collect::<Vec<_>>()
        ),
    )?;
    complete(&c, &got[0]).await
}
