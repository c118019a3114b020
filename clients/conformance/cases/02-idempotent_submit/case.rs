//! The `idempotent_submit` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use taskbroker_client::{Client, TaskSpec};

use crate::{Outcome, at, check};

pub(crate) async fn idempotent_submit(c: Client, q: String) -> Outcome {
    let first = at(
        "Submit",
        c.submit(TaskSpec::new(q.clone(), Vec::new()).key("order-42"))
            .await,
    )?;
    let second = at(
        "Submit",
        c.submit(TaskSpec::new(q, Vec::new()).key("order-42")).await,
    )?;
    check(
        first.task_id == second.task_id,
        "the two submits gave different task ids",
    )?;
    check(
        !first.deduplicated && second.deduplicated,
        format!(
            "deduplicated {} then {}, want false then true",
            first.deduplicated, second.deduplicated
        ),
    )
}
