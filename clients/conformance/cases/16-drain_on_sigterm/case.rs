//! The `drain_on_sigterm` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::sync::Arc;
use std::time::Duration;

use taskbroker_client::pb::TaskState;
use taskbroker_client::{Client, TaskContext, TaskError, TaskSpec};
use tokio::sync::Notify;

use crate::spec::worker;
use crate::{Outcome, at, check};

pub(crate) async fn drain_on_sigterm(c: Client, q: String) -> Outcome {
    let a = at(
        "Submit",
        c.submit(TaskSpec::new(q.clone(), b"a".to_vec())).await,
    )?
    .task_id;
    let running = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let (r, rel) = (running.clone(), release.clone());
    let w = worker(&c, &q)
        .concurrency(1)
        .queue(q.clone(), move |_ctx: TaskContext| {
            let (r, rel) = (r.clone(), rel.clone());
            async move {
                r.notify_one();
                rel.notified().await;
                Ok::<_, TaskError>("done")
            }
        })
        .build();
    let run = tokio::spawn(w.run_until_signal());
    tokio::time::timeout(Duration::from_secs(20), running.notified())
        .await
        .map_err(|_| "the handler never ran".to_string())?;
    let b = at(
        "Submit",
        c.submit(TaskSpec::new(q.clone(), b"b".to_vec())).await,
    )?
    .task_id;
    let pid = std::process::id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .map_err(|e| format!("kill: {e}"))?;
    check(killed.success(), "kill -TERM failed")?;
    // The signal arrives asynchronously; give the runtime a moment to stop leasing.
    tokio::time::sleep(Duration::from_millis(300)).await;
    release.notify_one();
    let ended = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .map_err(|_| "run did not return after SIGTERM".to_string())?;
    check(
        matches!(ended, Ok(Ok(()))),
        format!("run ended {ended:?}, want Ok"),
    )?;
    let sa = at("GetTask", c.get_task(&a).await)?.state();
    let sb = at("GetTask", c.get_task(&b).await)?.state();
    check(
        sa == TaskState::Succeeded && sb == TaskState::Ready,
        format!("a {sa:?}, b {sb:?}; want Succeeded, Ready"),
    )
}
