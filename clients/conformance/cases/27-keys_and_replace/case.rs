//! The `keys_and_replace` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::{Duration, SystemTime};

use taskbroker_client::pb::{self, TaskState};
use taskbroker_client::{Client, TaskSpec};

use crate::results::complete;
use crate::{Outcome, at, check};

/// A task's state and payload as one line of a failure.
fn describe(t: &pb::Task) -> String {
    format!(
        "{:?} with payload {:?}",
        t.state(),
        String::from_utf8_lossy(&t.payload)
    )
}

pub(crate) async fn keys_and_replace(c: Client, q: String) -> Outcome {
    let b = at(
        "Submit b",
        c.submit(TaskSpec::new(q.clone(), "b").depends_on_key(q.clone(), "k-a"))
            .await,
    )?
    .task_id;
    let tb = at("GetTask b", c.get_task(&b).await)?;
    check(
        tb.state() == TaskState::Blocked,
        format!("b is {}, want BLOCKED", describe(&tb)),
    )?;
    let hour = Duration::from_secs(3600);
    let first = at(
        "Submit digest v1",
        c.submit(
            TaskSpec::new(q.clone(), "v1")
                .key("digest")
                .run_at(SystemTime::now() + hour),
        )
        .await,
    )?;
    let second = at(
        "Submit digest v2",
        c.submit(
            TaskSpec::new(q.clone(), "v2")
                .key("digest")
                .run_at(SystemTime::now())
                .replace_waiting(),
        )
        .await,
    )?;
    check(
        second.task_id == first.task_id && second.deduplicated && second.replaced,
        format!(
            "the second submit of digest answered {} (deduplicated {}, replaced {}), \
             want {} with both true",
            second.task_id, second.deduplicated, second.replaced, first.task_id
        ),
    )?;
    let d = first.task_id;
    let a = at(
        "Submit a",
        c.submit(TaskSpec::new(q.clone(), "a").key("k-a")).await,
    )?
    .task_id;
    let got = crate::lease(&c, &q, 10, Duration::from_secs(30), Duration::ZERO).await?;
    let mut ids: Vec<&str> = got.iter().map(|t| t.task_id.as_str()).collect();
    ids.sort_unstable();
    let mut want = vec![a.as_str(), d.as_str()];
    want.sort_unstable();
    check(
        ids == want,
        format!("the first Lease returned {ids:?}, want exactly a {a} and d {d}"),
    )?;
    for t in &got {
        if t.task_id == d {
            check(
                t.payload == b"v2",
                format!(
                    "d was leased with payload {:?}, want v2",
                    String::from_utf8_lossy(&t.payload)
                ),
            )?;
            complete(&c, t, b"").await?;
        } else {
            complete(&c, t, b"a-result").await?;
        }
    }
    let tb = at("GetTask b", c.get_task(&b).await)?;
    check(
        tb.state() == TaskState::Ready,
        format!("after a's Complete b is {}, want READY", describe(&tb)),
    )?;
    let got = crate::lease(&c, &q, 10, Duration::from_secs(30), Duration::from_secs(5)).await?;
    check(
        got.len() == 1 && got[0].task_id == b,
        format!(
            "the second Lease returned {} tasks, want exactly b",
            got.len()
        ),
    )?;
    let results = &got[0].dependency_results;
    check(
        results.len() == 1 && results.get(&a).map(Vec::as_slice) == Some(b"a-result".as_slice()),
        format!("b was leased with dependency_results {results:?}, want {{{a}: a-result}}"),
    )?;
    complete(&c, &got[0], b"").await
}
