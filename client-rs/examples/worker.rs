//! A worker for the `emails` queue: prints each task and "sends" it.
//!
//! ```sh
//! TASKBROKER_ADDR=http://127.0.0.1:50051 cargo run -p taskbroker-client --example worker
//! ```
//! Stop it with Ctrl-C: it stops leasing and lets running tasks finish.

use std::time::Duration;

use taskbroker_client::{Client, DEFAULT_ADDR, TaskContext, TaskError, Worker, WorkerEvent};

/// The handler: an async fn of the task's context returning the result (or why not).
async fn send_email(ctx: TaskContext) -> Result<String, TaskError> {
    let body = String::from_utf8_lossy(ctx.payload()).into_owned();
    if body.is_empty() {
        // Running it again would not help: no retry, the task goes DEAD.
        return Err(TaskError::permanent("empty payload: nothing to send"));
    }
    println!(
        "task {} (attempt {}): sending {body:?}",
        ctx.task_id(),
        ctx.attempt()
    );
    tokio::select! {
        // Pretend the mail server takes a moment.
        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        // An operator ran `taskbroker cancel ID`, or the lease was lost.
        _ = ctx.cancelled() => return Err(TaskError::retry("stopped before sending")),
    }
    Ok(format!("sent {} bytes", body.len()))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let addr = std::env::var("TASKBROKER_ADDR").unwrap_or_else(|_| DEFAULT_ADDR.into());
    let client = Client::builder(addr.clone())
        .env_settings()?
        .connect()
        .await?;
    let worker = Worker::builder(client)
        .queue("emails", send_email)
        .concurrency(4)
        .shutdown_grace(Duration::from_secs(10))
        .build();
    println!(
        "worker {} waiting for tasks on 'emails' at {addr} (Ctrl-C stops)",
        worker.worker_id()
    );

    let mut events = worker.subscribe();
    tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            if let WorkerEvent::Finished { task_id, outcome } = event {
                println!("task {task_id}: {outcome:?}");
            }
        }
    });
    worker
        // SIGTERM (Kubernetes) or Ctrl-C: stop leasing, finish the running tasks.
        .run(async {
            taskbroker_client::worker::shutdown_signal().await;
            println!("stopping: finishing running tasks");
        })
        .await?;
    Ok(())
}
