//! A long task that survives crashes: it saves a checkpoint every few items and,
//! when run again after the worker was killed, resumes from the last one.
//!
//! ```sh
//! export TASKBROKER_ADDR=http://127.0.0.1:50051
//! cargo run -p taskbroker-client --example long_task -- submit 60
//! cargo run -p taskbroker-client --example long_task -- work    # kill it (Ctrl-C or kill -9) midway
//! cargo run -p taskbroker-client --example long_task -- work    # resumes from the checkpoint
//! ```
//! After `kill -9` the broker hands the task out again once its 5 s lease runs out;
//! after Ctrl-C the worker hands it back at once.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use taskbroker_client::{Client, DEFAULT_ADDR, TaskContext, TaskError, TaskSpec, Worker};

const QUEUE: &str = "long-jobs";
/// Save progress after this many items.
const CHECKPOINT_EVERY: u64 = 5;

#[derive(Serialize, Deserialize)]
struct Job {
    items: u64,
}

async fn process(ctx: TaskContext) -> Result<String, TaskError> {
    let job: Job = ctx.json()?;
    // The checkpoint is the number of items already done, as text.
    let start = match ctx.last_checkpoint() {
        Some(cp) => String::from_utf8_lossy(&cp)
            .parse::<u64>()
            .map_err(TaskError::permanent)?,
        None => 0,
    };
    println!(
        "task {} attempt {}: items {start}..{}",
        ctx.task_id(),
        ctx.attempt(),
        job.items
    );
    for item in start..job.items {
        tokio::select! {
            // One item of real work would go here.
            _ = tokio::time::sleep(Duration::from_millis(300)) => {}
            _ = ctx.cancelled() => {
                return Err(TaskError::retry_after(format!("stopped at item {item}"), Duration::ZERO));
            }
        }
        let done = item + 1;
        if done % CHECKPOINT_EVERY == 0 {
            ctx.checkpoint(done.to_string()).await?;
            println!("  checkpoint: {done} done");
        }
    }
    Ok(format!("processed {} items, resumed at {start}", job.items))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("TASKBROKER_ADDR").unwrap_or_else(|_| DEFAULT_ADDR.into());
    let client = Client::builder(addr).env_settings()?.connect().await?;
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("submit") => {
            let items = args.next().map(|n| n.parse()).transpose()?.unwrap_or(60);
            // Retry at once after a crash: the checkpoint keeps the work done so far.
            let spec = TaskSpec::json(QUEUE, &Job { items })?
                .max_attempts(10)
                .initial_backoff(Duration::ZERO);
            println!("{}", client.submit(spec).await?.task_id);
        }
        Some("work") => {
            Worker::builder(client)
                .queue(QUEUE, process)
                .concurrency(1)
                .lease_duration(Duration::from_secs(5))
                .shutdown_grace(Duration::from_secs(1))
                .build()
                .run_until_signal()
                .await?;
        }
        _ => eprintln!("usage: long_task submit [ITEMS] | long_task work"),
    }
    Ok(())
}
