//! The `checkpoint_extends` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use taskbroker_client::pb::TaskState;
use taskbroker_client::{Client, TaskContext, TaskError, TaskSpec};
use tokio::sync::oneshot;

use crate::spec::worker;
use crate::{Outcome, at, check};

async fn wait_state(c: &Client, id: &str, want: TaskState) -> Result<TaskState, String> {
    let end = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let s = at("GetTask", c.get_task(id).await)?.state();
        if s == want || tokio::time::Instant::now() > end {
            return Ok(s);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) async fn checkpoint_extends(c: Client, q: String) -> Outcome {
    let id = at(
        "Submit",
        c.submit(TaskSpec::new(q.clone(), Vec::new())).await,
    )?
    .task_id;
    let seen: Arc<Mutex<Vec<Option<SystemTime>>>> = Arc::default();
    let s = seen.clone();
    let w = worker(&c, &q)
        .lease_duration(Duration::from_secs(4))
        .queue(q.clone(), move |ctx: TaskContext| {
            let s = s.clone();
            async move {
                let leased = ctx.lease_expires_at();
                tokio::time::sleep(Duration::from_millis(100)).await;
                ctx.checkpoint(b"half".to_vec())
                    .await
                    .map_err(TaskError::retry)?;
                let after = ctx.lease_expires_at();
                s.lock().unwrap().extend([leased, after]);
                Ok::<_, TaskError>("ok")
            }
        })
        .build();
    let (stop, stopped) = oneshot::channel::<()>();
    let run = tokio::spawn(w.run(async {
        let _ = stopped.await;
    }));
    let state = wait_state(&c, &id, TaskState::Succeeded).await;
    let _ = stop.send(());
    let _ = run.await;
    check(state? == TaskState::Succeeded, "the task did not succeed")?;
    let seen = seen.lock().unwrap().clone();
    check(
        matches!(seen.as_slice(), [Some(a), Some(b)] if b > a),
        format!("expiry {seen:?}: the checkpoint did not extend the lease"),
    )
}
