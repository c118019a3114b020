//! The `dependency` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::Duration;

use taskbroker_client::pb::{self, CancelReason, TaskState};
use taskbroker_client::{Client, TaskSpec};

use crate::flow::{complete, lease, payloads};
use crate::{Outcome, at, check};

pub(crate) async fn dependency(c: Client, q: String) -> Outcome {
    let ab = at(
        "Submit",
        c.submit_many([
            TaskSpec::new(q.clone(), "a"),
            TaskSpec::new(q.clone(), "b").depends_on_index(0),
        ])
        .await,
    )?;
    let (a, b) = (&ab[0].task_id, &ab[1].task_id);
    let tb = at("GetTask", c.get_task(b).await)?;
    check(
        tb.state() == TaskState::Blocked,
        format!("b is {:?}, want BLOCKED", tb.state()),
    )?;
    check(
        tb.depends_on == [a.clone()],
        format!("b depends_on {:?}, want [{a}]", tb.depends_on),
    )?;
    let got = lease(&c, &q, 10, Duration::ZERO).await?;
    check(
        payloads(&got) == ["a"],
        format!("first Lease returned {:?}, want [a]", payloads(&got)),
    )?;
    complete(&c, &got[0], "").await?;
    let tb = at("GetTask", c.get_task(b).await)?;
    check(
        tb.state() == TaskState::Ready,
        format!("after a completed b is {:?}, want READY", tb.state()),
    )?;
    let got = lease(&c, &q, 10, Duration::from_secs(5)).await?;
    check(
        payloads(&got) == ["b"],
        format!("second Lease returned {:?}, want [b]", payloads(&got)),
    )?;
    complete(&c, &got[0], "").await?;

    let cid = at("Submit", c.submit(TaskSpec::new(q.clone(), "c")).await)?.task_id;
    let de = at(
        "Submit",
        c.submit_many([
            TaskSpec::new(q.clone(), "d").depends_on(cid.clone()),
            TaskSpec::new(q.clone(), "e")
                .depends_on(cid.clone())
                .run_if_dependency_fails(),
        ])
        .await,
    )?;
    let got = lease(&c, &q, 10, Duration::ZERO).await?;
    check(
        payloads(&got) == ["c"],
        format!(
            "third Lease returned {:?}, want [c] (d and e BLOCKED)",
            payloads(&got)
        ),
    )?;
    let fail = pb::FailRequest {
        task_id: got[0].task_id.clone(),
        lease_token: got[0].lease_token.clone(),
        error_message: "broken".into(),
        non_retryable: true,
        retry_after: None,
        prefer_same_worker: false,
        lease_next: None,
        cooldown: None,
    };
    at("Fail", c.fail(fail).await)?;
    let d = at("GetTask", c.get_task(&de[0].task_id).await)?;
    check(
        d.state() == TaskState::Cancelled && d.cancel_reason() == CancelReason::DependencyFailed,
        format!(
            "d is {:?} ({:?}), want CANCELLED (DEPENDENCY_FAILED)",
            d.state(),
            d.cancel_reason()
        ),
    )?;
    let e = at("GetTask", c.get_task(&de[1].task_id).await)?;
    check(
        e.state() == TaskState::Ready,
        format!("e (run_if_dependency_fails) is {:?}, want READY", e.state()),
    )
}
