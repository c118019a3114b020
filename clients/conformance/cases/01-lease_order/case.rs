//! The `lease_order` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::{Duration, SystemTime};

use taskbroker_client::pb;
use taskbroker_client::{Client, TaskSpec};

use crate::{Outcome, at, check, lease};

pub(crate) async fn lease_order(c: Client, q: String) -> Outcome {
    let now = SystemTime::now();
    let hour = Duration::from_secs(3600);
    let spec = |p: &str, prio: i32| TaskSpec::new(q.clone(), p.as_bytes().to_vec()).priority(prio);
    at(
        "Submit",
        c.submit_many([
            spec("a", 0),
            spec("b", 5),
            spec("c", 5).deadline(now + 2 * hour),
            spec("d", 5).deadline(now + hour),
            spec("e", -1),
            spec("f", 10).run_at(now + hour),
        ])
        .await,
    )?;
    let tasks = lease(&c, &q, 10, Duration::from_secs(30), Duration::ZERO).await?;
    let got: Vec<String> = tasks
        .iter()
        .map(|t| String::from_utf8_lossy(&t.payload).into_owned())
        .collect();
    check(
        got == ["d", "c", "b", "a", "e"],
        format!("leased {got:?}, want [d, c, b, a, e]"),
    )?;
    check(tasks.iter().all(|t| t.attempt == 1), "an attempt is not 1")?;
    for t in tasks {
        let req = pb::CompleteRequest {
            task_id: t.task_id,
            lease_token: t.lease_token,
            result: Vec::new(),
            lease_next: None,
        };
        at("Complete", c.complete(req).await)?;
    }
    Ok(())
}
