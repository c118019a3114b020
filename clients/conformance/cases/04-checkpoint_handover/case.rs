//! The `checkpoint_handover` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::Duration;

use taskbroker_client::pb;
use taskbroker_client::{Client, TaskSpec};

use crate::{Outcome, at, check, lease_one, submit};

pub(crate) async fn checkpoint_handover(c: Client, q: String) -> Outcome {
    submit(
        &c,
        TaskSpec::new(q.clone(), Vec::new()).initial_backoff(Duration::ZERO),
    )
    .await?;
    let first = lease_one(&c, &q, Duration::from_secs(1), Duration::ZERO).await?;
    let req = pb::CheckpointRequest {
        task_id: first.task_id.clone(),
        lease_token: first.lease_token.clone(),
        checkpoint: b"step-3".to_vec(),
        extend_by: None,
    };
    at("Checkpoint", c.checkpoint(req).await)?;
    let second = lease_one(&c, &q, Duration::from_secs(30), Duration::from_secs(15)).await?;
    check(
        second.task_id == first.task_id,
        "a different task was leased",
    )?;
    check(
        second.attempt == 2,
        format!("attempt {}, want 2", second.attempt),
    )?;
    check(
        second.has_checkpoint && second.checkpoint == b"step-3",
        "the checkpoint was not handed over",
    )?;
    check(
        second.fencing_token > first.fencing_token,
        "the fencing token did not increase",
    )
}
