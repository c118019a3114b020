//! The `dead_result` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::Duration;

use taskbroker_client::pb::TaskState;
use taskbroker_client::{Client, TaskContext, TaskError, TaskSpec, Worker};

use crate::{Outcome, WORKER_ID, at, check};

/// `dead_result`: a handler that fails for good; waiting for its task, and the typed
/// `submit_and_wait_json`, give `Error::TaskFailed` with the id, DEAD and its message.
pub(crate) async fn dead_result(c: Client, q: String) -> Outcome {
    let d = at(
        "Submit d",
        c.submit(TaskSpec::new(q.clone(), "order-7")).await,
    )?
    .task_id;
    let w = Worker::builder(c.clone())
        .worker_id(WORKER_ID)
        .lease_wait(Duration::from_secs(1))
        .queue(&q, |_ctx: TaskContext| async move {
            Err::<Vec<u8>, _>(TaskError::permanent("no such order"))
        })
        .build();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(w.run(async move {
        let _ = stopped.await;
    }));
    let waited = c.wait(&d, Duration::from_secs(20)).await;
    let typed = c
        .submit_and_wait_json::<_, String>(q.clone(), "order-8", Duration::from_secs(20))
        .await;
    let _ = stop.send(());
    let ran = running.await.map_err(|e| e.to_string())?;
    at("Worker::run", ran)?;
    let failed = |what: &str, r: Result<String, taskbroker_client::Error>| match r {
        Err(taskbroker_client::Error::TaskFailed {
            task_id,
            state,
            error,
        }) => Ok((task_id, state, error)),
        other => Err(format!("{what} gave {other:?}, want Error::TaskFailed")),
    };
    let (id, state, error) = failed("wait", waited.map(|_| String::new()))?;
    check(
        id == d && state == TaskState::Dead && error == "no such order",
        format!(
            "wait: TaskFailed {{ {id}, {state:?}, {error:?} }}, want {{ {d}, Dead, \"no such order\" }}"
        ),
    )?;
    let (id, state, error) = failed("submit_and_wait_json", typed)?;
    check(
        !id.is_empty() && id != d && state == TaskState::Dead && error == "no such order",
        format!(
            "submit_and_wait_json: TaskFailed {{ {id:?}, {state:?}, {error:?} }}, want a new task, Dead, \"no such order\""
        ),
    )
}
