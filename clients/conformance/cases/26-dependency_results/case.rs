//! The `dependency_results` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use taskbroker_client::pb::TaskState;
use taskbroker_client::{Client, TaskContext, TaskError, TaskSpec, Worker};

use crate::{Outcome, WORKER_ID, at, check};

/// A task's dependency results, by task id.
type Results = HashMap<String, Vec<u8>>;

pub(crate) async fn dependency_results(c: Client, q: String) -> Outcome {
    let a = at("Submit a", c.submit(TaskSpec::new(q.clone(), "a")).await)?.task_id;
    let b = at(
        "Submit b",
        c.submit(TaskSpec::new(q.clone(), "b").depends_on(a.clone()))
            .await,
    )?
    .task_id;
    let seen: Arc<Mutex<Option<Results>>> = Arc::default();
    let (recorded, dep) = (seen.clone(), a.clone());
    let w = Worker::builder(c.clone())
        .worker_id(WORKER_ID)
        .lease_wait(Duration::from_secs(1))
        .queue(&q, move |ctx: TaskContext| {
            let (recorded, dep) = (recorded.clone(), dep.clone());
            async move {
                if ctx.task_id() == dep {
                    return Ok::<_, TaskError>(b"a-result".to_vec());
                }
                let results = ctx.dependency_results().clone();
                *recorded.lock().unwrap() = Some(results.clone());
                Ok(results.get(&dep).cloned().unwrap_or_default())
            }
        })
        .build();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(w.run(async move {
        let _ = stopped.await;
    }));
    let waited = c.wait(&b, Duration::from_secs(20)).await;
    let _ = stop.send(());
    let ran = running.await.map_err(|e| e.to_string())?;
    at("wait b", waited)?;
    at("Worker::run", ran)?;
    let seen = seen.lock().unwrap().clone().unwrap_or_default();
    check(
        seen.len() == 1 && seen.get(&a).map(Vec::as_slice) == Some(b"a-result".as_slice()),
        format!("b's handler saw dependency_results {seen:?}, want {{{a}: a-result}}"),
    )?;
    let tb = at("GetTask", c.get_task(&b).await)?;
    check(
        tb.state() == TaskState::Succeeded && tb.result == b"a-result",
        format!(
            "b is {:?} with result {:?}, want SUCCEEDED with a-result",
            tb.state(),
            String::from_utf8_lossy(&tb.result)
        ),
    )
}
