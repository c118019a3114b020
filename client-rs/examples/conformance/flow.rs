//! The flow cases of the scenario: `dependency` through `TaskSpec`'s
//! dependency builders and the generated stubs, and `wait_by_stream` with
//! `Client::wait`, which follows `AdminService.WatchTasks`.

use std::time::Duration;

use taskbroker_client::pb::{self, CancelReason, TaskState};
use taskbroker_client::time::to_proto_duration;
use taskbroker_client::{Client, Error, TaskSpec};

use crate::{Outcome, WORKER_ID, at, check};

async fn lease(
    c: &Client,
    queue: &str,
    n: u32,
    wait: Duration,
) -> Result<Vec<pb::LeasedTask>, String> {
    let req = pb::LeaseRequest {
        worker_id: WORKER_ID.into(),
        queues: vec![queue.into()],
        max_tasks: n,
        lease_duration: Some(to_proto_duration(Duration::from_secs(30))),
        wait: Some(to_proto_duration(wait)),
        labels: Default::default(),
    };
    at("Lease", c.lease(req).await)
}

fn payloads(tasks: &[pb::LeasedTask]) -> Vec<String> {
    tasks
        .iter()
        .map(|t| String::from_utf8_lossy(&t.payload).into_owned())
        .collect()
}

async fn complete(c: &Client, t: &pb::LeasedTask, result: &str) -> Outcome {
    let req = pb::CompleteRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
        result: result.as_bytes().to_vec(),
        lease_next: None,
    };
    at("Complete", c.complete(req).await).map(|_| ())
}

pub async fn dependency(c: Client, q: String) -> Outcome {
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

pub async fn wait_by_stream(c: Client, q: String) -> Outcome {
    let w = at("Submit", c.submit(TaskSpec::new(q.clone(), "w")).await)?.task_id;
    let waiting = {
        let (c, w) = (c.clone(), w.clone());
        tokio::spawn(async move { c.wait(&w, Duration::from_secs(20)).await })
    };
    let got = lease(&c, &q, 1, Duration::from_secs(10)).await?;
    check(
        got.len() == 1 && got[0].task_id == w,
        format!("Lease returned {:?}, want {w}", payloads(&got)),
    )?;
    complete(&c, &got[0], "waited").await?;
    let result = waiting
        .await
        .map_err(|e| format!("the wait panicked: {e}"))?;
    let result = at("wait", result)?;
    check(
        result == b"waited",
        format!(
            "wait returned {:?}, want \"waited\"",
            String::from_utf8_lossy(&result)
        ),
    )?;
    at("second wait", c.wait(&w, Duration::from_secs(5)).await)?;
    let x = at("Submit", c.submit(TaskSpec::new(q.clone(), "x")).await)?.task_id;
    match c.wait(&x, Duration::from_millis(500)).await {
        Err(Error::Timeout { .. }) => {}
        other => {
            return Err(format!(
                "the wait on x ended with {other:?}, want Error::Timeout"
            ));
        }
    }
    let tx = at("GetTask", c.get_task(&x).await)?;
    check(
        tx.state() == TaskState::Ready,
        format!("x is {:?} after the timeout, want READY", tx.state()),
    )
}
