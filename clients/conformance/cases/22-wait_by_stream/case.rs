//! The `wait_by_stream` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::Duration;

use taskbroker_client::pb::TaskState;
use taskbroker_client::{Client, Error, TaskSpec};

use crate::flow::{complete, lease, payloads};
use crate::{Outcome, at, check};

pub(crate) async fn wait_by_stream(c: Client, q: String) -> Outcome {
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
