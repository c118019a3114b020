//! Submits a few tasks to the `emails` queue, then one more whose result it waits for
//! (run `--example worker` alongside to see it answered).
//!
//! ```sh
//! TASKBROKER_ADDR=http://127.0.0.1:50051 cargo run -p taskbroker-client --example producer
//! ```

use std::time::Duration;

use serde::Serialize;
use taskbroker_client::{Client, DEFAULT_ADDR, Error, TaskSpec};

#[derive(Serialize)]
struct Email<'a> {
    to: &'a str,
    subject: &'a str,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("TASKBROKER_ADDR").unwrap_or_else(|_| DEFAULT_ADDR.into());
    let client = Client::builder(addr).env_settings()?.connect().await?;

    // Typed payloads go as JSON; the key makes a resubmission a no-op.
    for (i, to) in ["ada@example.com", "grace@example.com", "linus@example.com"]
        .iter()
        .enumerate()
    {
        let email = Email {
            to,
            subject: "Your order shipped",
        };
        let spec = TaskSpec::json("emails", &email)?
            .key(format!("order-{}", 40 + i))
            .priority(5)
            .max_attempts(5)
            .initial_backoff(Duration::from_secs(2));
        let s = client.submit(spec).await?;
        let note = if s.deduplicated {
            " (already there)"
        } else {
            ""
        };
        println!("submitted {}{note}", s.task_id);
    }

    // One that runs in 30 seconds, and one that must be done within a minute.
    client
        .submit(TaskSpec::new("emails", "reminder").run_in(Duration::from_secs(30)))
        .await?;
    client
        .submit(TaskSpec::new("emails", "urgent").deadline_in(Duration::from_secs(60)))
        .await?;

    // Call it like a local function: submit, then wait for the worker's result.
    println!("waiting up to 30 s for a worker to answer...");
    match client
        .submit_and_wait(
            TaskSpec::new("emails", "hello from the producer"),
            Duration::from_secs(30),
        )
        .await
    {
        Ok(result) => println!("result: {}", String::from_utf8_lossy(&result)),
        Err(Error::Timeout { task_id, .. }) => {
            println!("no answer yet for {task_id}; is `--example worker` running?")
        }
        Err(e) => println!("the task failed: {e}"),
    }
    Ok(())
}
