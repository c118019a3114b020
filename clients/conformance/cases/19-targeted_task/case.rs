//! The `targeted_task` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::collections::HashMap;
use std::time::Duration;

use taskbroker_client::pb;
use taskbroker_client::{Client, TaskSpec};

use crate::routing::{complete, labels, lease_as};
use crate::{Outcome, WORKER_ID, at, check};

fn payloads(tasks: &[pb::LeasedTask]) -> Vec<String> {
    tasks
        .iter()
        .map(|t| String::from_utf8_lossy(&t.payload).into_owned())
        .collect()
}

pub(crate) async fn targeted_task(c: Client, q: String) -> Outcome {
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
