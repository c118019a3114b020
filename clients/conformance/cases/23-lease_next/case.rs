//! The `lease_next` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::Duration;

use taskbroker_client::pb::{self, TaskState};
use taskbroker_client::time::to_proto_duration;
use taskbroker_client::{Client, TaskSpec};

use crate::{Outcome, WORKER_ID, at, check};

fn payloads(tasks: &[pb::LeasedTask]) -> Vec<String> {
    tasks
        .iter()
        .map(|t| String::from_utf8_lossy(&t.payload).into_owned())
        .collect()
}

fn next(queue: &str, max_tasks: u32) -> pb::LeaseRequest {
    pb::LeaseRequest {
        worker_id: WORKER_ID.into(),
        queues: vec![queue.into()],
        max_tasks,
        lease_duration: Some(to_proto_duration(Duration::from_secs(30))),
        wait: None,
        labels: Default::default(),
    }
}

/// Complete through the stub: Ok(next_tasks) or the broker's status.
async fn complete(
    c: &Client,
    t: &pb::LeasedTask,
    lease_next: pb::LeaseRequest,
) -> Result<Vec<pb::LeasedTask>, tonic::Status> {
    let mut req = tonic::Request::new(pb::CompleteRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
        result: Vec::new(),
        lease_next: Some(lease_next),
    });
    req.set_timeout(Duration::from_secs(10));
    if let Ok(token) = std::env::var("TASKBROKER_TOKEN")
        && let Ok(v) = format!("Bearer {token}").parse()
    {
        req.metadata_mut().insert("authorization", v);
    }
    let resp = c.broker_stub().complete(req).await?;
    Ok(resp.into_inner().next_tasks)
}

async fn state(c: &Client, task_id: &str) -> Result<TaskState, String> {
    Ok(at("GetTask", c.get_task(task_id).await)?.state())
}

pub(crate) async fn lease_next(c: Client, q: String) -> Outcome {
    let ids = at(
        "Submit",
        c.submit_many([
            TaskSpec::new(q.clone(), "a").priority(2),
            TaskSpec::new(q.clone(), "b").priority(1),
            TaskSpec::new(q.clone(), "c").priority(0),
        ])
        .await,
    )?;
    let mut first = next(&q, 1);
    first.wait = Some(to_proto_duration(Duration::ZERO));
    let got = at("Lease", c.lease(first).await)?;
    check(
        payloads(&got) == ["a"],
        format!("Lease returned {:?}, want [a]", payloads(&got)),
    )?;
    let b = complete(&c, &got[0], next(&q, 1))
        .await
        .map_err(|s| format!("Complete a: {:?} {}", s.code(), s.message()))?;
    check(
        payloads(&b) == ["b"],
        format!("Complete's next_tasks {:?}, want [b]", payloads(&b)),
    )?;
    check(
        b[0].attempt == 1 && !b[0].lease_token.is_empty(),
        format!("b: attempt {}, want 1 with a lease token", b[0].attempt),
    )?;
    let sa = state(&c, &ids[0].task_id).await?;
    check(
        sa == TaskState::Succeeded,
        format!("a is {sa:?}, want SUCCEEDED"),
    )?;
    let failed = at(
        "Fail b",
        c.fail(pb::FailRequest {
            task_id: b[0].task_id.clone(),
            lease_token: b[0].lease_token.clone(),
            error_message: "boom".into(),
            non_retryable: true,
            lease_next: Some(next(&q, 1)),
            ..Default::default()
        })
        .await,
    )?;
    check(
        failed.state() == TaskState::Dead,
        format!("Fail: state {:?}, want DEAD", failed.state()),
    )?;
    let cs = failed.next_tasks;
    check(
        payloads(&cs) == ["c"],
        format!("Fail's next_tasks {:?}, want [c]", payloads(&cs)),
    )?;
    match complete(&c, &cs[0], next(&q, 0)).await {
        Ok(_) => {
            return Err("Complete with lease_next.max_tasks 0: OK, want INVALID_ARGUMENT".into());
        }
        Err(s) => check(
            s.code() == tonic::Code::InvalidArgument
                && s.message().contains("lease_next.max_tasks"),
            format!(
                "Complete with lease_next.max_tasks 0: {:?} {:?}, want INVALID_ARGUMENT naming lease_next.max_tasks",
                s.code(),
                s.message()
            ),
        )?,
    }
    let sc = state(&c, &ids[2].task_id).await?;
    check(
        sc == TaskState::Leased,
        format!("c is {sc:?} after the refused Complete, want LEASED"),
    )?;
    let none = complete(&c, &cs[0], next(&q, 1))
        .await
        .map_err(|s| format!("Complete c: {:?} {}", s.code(), s.message()))?;
    check(
        none.is_empty(),
        format!(
            "the last Complete's next_tasks {:?}, want none",
            payloads(&none)
        ),
    )?;
    let sc = state(&c, &ids[2].task_id).await?;
    check(
        sc == TaskState::Succeeded,
        format!("c is {sc:?}, want SUCCEEDED"),
    )
}
