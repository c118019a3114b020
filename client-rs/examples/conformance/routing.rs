//! The routing cases of the scenario: `targeted_task` and `sticky_retry`,
//! leasing on the generated stubs, submitting through `TaskSpec`'s routing builders.

use std::collections::HashMap;
use std::time::Duration;

use taskbroker_client::pb::{self, TaskState};
use taskbroker_client::time::to_proto_duration;
use taskbroker_client::{Client, Sticky, TaskSpec};

use crate::{Outcome, WORKER_ID, at, check};

fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Lease from `queue` as `worker_id` carrying `labels` (30 s leases).
async fn lease_as(
    c: &Client,
    queue: &str,
    worker_id: &str,
    labels: HashMap<String, String>,
    wait: Duration,
) -> Result<Vec<pb::LeasedTask>, String> {
    let req = pb::LeaseRequest {
        worker_id: worker_id.into(),
        queues: vec![queue.into()],
        max_tasks: 10,
        lease_duration: Some(to_proto_duration(Duration::from_secs(30))),
        wait: Some(to_proto_duration(wait)),
        labels,
    };
    at("Lease", c.lease(req).await)
}

fn payloads(tasks: &[pb::LeasedTask]) -> Vec<String> {
    tasks
        .iter()
        .map(|t| String::from_utf8_lossy(&t.payload).into_owned())
        .collect()
}

async fn complete(c: &Client, t: &pb::LeasedTask) -> Outcome {
    let req = pb::CompleteRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
        result: Vec::new(),
        lease_next: None,
    };
    at("Complete", c.complete(req).await)
}

pub async fn targeted_task(c: Client, q: String) -> Outcome {
    let elsewhere = format!("{WORKER_ID}-elsewhere");
    let a = TaskSpec::new(q.clone(), "a").target_label("gpu", "a100");
    let b = TaskSpec::new(q.clone(), "b").target_worker(elsewhere.clone());
    at("Submit", c.submit_many([a, b]).await)?;

    let zero = Duration::ZERO;
    let got = lease_as(&c, &q, WORKER_ID, HashMap::new(), zero).await?;
    check(
        got.is_empty(),
        format!("a worker without labels leased {:?}", payloads(&got)),
    )?;
    let carrying = labels(&[("gpu", "a100"), ("region", "eu")]);
    let got = lease_as(&c, &q, WORKER_ID, carrying.clone(), zero).await?;
    check(
        payloads(&got) == ["a"],
        format!("the labelled worker leased {:?}, want [a]", payloads(&got)),
    )?;
    complete(&c, &got[0]).await?;
    let got = lease_as(&c, &q, WORKER_ID, carrying, zero).await?;
    check(
        got.is_empty(),
        format!(
            "the labelled worker leased {:?}, a task targeted at another worker",
            payloads(&got)
        ),
    )?;
    let got = lease_as(&c, &q, &elsewhere, HashMap::new(), zero).await?;
    check(
        payloads(&got) == ["b"],
        format!("{elsewhere} leased {:?}, want [b]", payloads(&got)),
    )?;
    complete(&c, &got[0]).await
}

pub async fn sticky_retry(c: Client, q: String) -> Outcome {
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
