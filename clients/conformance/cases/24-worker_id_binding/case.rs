//! The `worker_id_binding` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::Duration;

use taskbroker_client::pb::{self, TaskState};
use taskbroker_client::time::to_proto_duration;
use taskbroker_client::{Client, Error, TaskContext, TaskError, TaskSpec, Worker};

use crate::{Outcome, WORKER_ID, at, check};

fn lease_as(queue: &str, worker_id: &str) -> pb::LeaseRequest {
    pb::LeaseRequest {
        worker_id: worker_id.into(),
        queues: vec![queue.into()],
        max_tasks: 1,
        lease_duration: Some(to_proto_duration(Duration::from_secs(30))),
        wait: None,
        labels: Default::default(),
    }
}

pub(crate) async fn worker_id_binding(c: Client, q: String) -> Outcome {
    let id = at(
        "Submit",
        c.submit(TaskSpec::new(q.clone(), b"bound".to_vec())).await,
    )?
    .task_id;
    let token = std::env::var("TASKBROKER_WORKER_TOKEN").ok();
    let w = match &token {
        None => c.clone(),
        Some(token) => {
            let addr = std::env::var("TASKBROKER_ADDR").unwrap_or_default();
            at(
                "connect",
                match Client::builder(addr).env_settings() {
                    Ok(b) => b.bearer_token(token.clone()).connect().await,
                    Err(e) => Err(e),
                },
            )?
        }
    };
    let bound = format!("{WORKER_ID}-bound-1");
    let got = at("Lease", w.lease(lease_as(&q, &bound)).await)?;
    check(
        got.len() == 1 && got[0].task_id == id,
        format!("Lease as {bound} returned {} tasks, want {id}", got.len()),
    )?;
    if token.is_some() {
        match w.lease(lease_as(&q, WORKER_ID)).await {
            Ok(_) => return Err(format!("Lease as {WORKER_ID}: OK, want PERMISSION_DENIED")),
            Err(e) => check(
                e.code() == Some(tonic::Code::PermissionDenied)
                    && e.to_string().contains("worker_id"),
                format!("Lease as {WORKER_ID}: {e}, want PERMISSION_DENIED naming worker_id"),
            )?,
        }
    }
    let done = pb::CompleteRequest {
        task_id: id.clone(),
        lease_token: got[0].lease_token.clone(),
        result: Vec::new(),
        lease_next: None,
    };
    at("Complete", w.complete(done).await)?;
    let state = at("GetTask", c.get_task(&id).await)?.state();
    check(
        state == TaskState::Succeeded,
        format!("the task is {state:?}, want Succeeded"),
    )?;
    if token.is_none() {
        return Ok(());
    }
    let worker = Worker::builder(w.clone())
        .worker_id(WORKER_ID)
        .lease_wait(Duration::from_secs(1))
        .queue(q.clone(), |_ctx: TaskContext| async {
            Ok::<_, TaskError>(())
        })
        .build();
    let r: Result<(), Error> =
        tokio::time::timeout(Duration::from_secs(20), worker.run(std::future::pending()))
            .await
            .map_err(|_| "the worker kept running".to_string())?;
    check(
        r.as_ref().err().and_then(Error::code) == Some(tonic::Code::PermissionDenied),
        format!("Worker as {WORKER_ID}: run ended {r:?}, want PERMISSION_DENIED"),
    )
}
