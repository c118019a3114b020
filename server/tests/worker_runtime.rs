//! End-to-end tests of the Rust worker runtime (`taskbroker_client::Worker`) and of
//! `Client::submit_and_wait`, against a real broker over gRPC on both backends.
//!
//! Nothing here sleeps to wait for something: tests wait for worker events,
//! channels and semaphores. `within` only bounds a wait so that a broken runtime
//! fails the test instead of hanging it.

mod common;

use std::future::Future;

use std::sync::Arc;

use std::sync::atomic::{AtomicUsize, Ordering};

use std::time::Duration;

use common::{Backend, Options, TestApp, spawn_app, spawn_app_with};

use futures::TryStreamExt;

use taskbroker_client::pb::{AttemptOutcome, TaskState};

use taskbroker_client::worker::Outcome;

use taskbroker_client::{
    CancelReason, Client, Error, Json, TaskContext, TaskError, TaskFilter, TaskSpec, Worker,
    WorkerEvent,
};

use tokio::sync::{Semaphore, broadcast, mpsc, oneshot};

use tokio::task::JoinHandle;

/// The longest any single wait may take before the test is declared stuck.
const GUARD: Duration = Duration::from_secs(60);

async fn within<F: Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(GUARD, f).await {
        Ok(v) => v,
        Err(_) => panic!("stuck: {what} did not happen within {GUARD:?}"),
    }
}

/// A broker with a real clock and a reaper every 200 ms, for lease expiry in real time.
async fn spawn_real_clock(b: Backend) -> Option<TestApp> {
    spawn_app_with(
        b,
        Options {
            manual_clock: false,
            reclaim_interval: Duration::from_millis(200),
            ..Default::default()
        },
    )
    .await
}

async fn client(app: &TestApp) -> Client {
    Client::connect(app.url()).await.expect("client connects")
}

/// A worker running in its own tokio task until `stop` (or until aborted).
struct Running {
    handle: JoinHandle<Result<(), Error>>,
    stop: oneshot::Sender<()>,
}

fn start(worker: Worker) -> Running {
    let (stop, stopped) = oneshot::channel::<()>();
    let handle = tokio::spawn(worker.run(async move {
        let _ = stopped.await;
    }));
    Running { handle, stop }
}

impl Running {
    async fn stop(self) -> Result<(), Error> {
        let _ = self.stop.send(());
        within("the worker to stop", self.handle)
            .await
            .expect("the worker's task does not panic")
    }
}

/// The next event for which `pick` returns something.
async fn next_event<T>(
    events: &mut broadcast::Receiver<WorkerEvent>,
    what: &str,
    mut pick: impl FnMut(&WorkerEvent) -> Option<T>,
) -> T {
    within(what, async {
        loop {
            match events.recv().await {
                Ok(e) => {
                    if let Some(v) = pick(&e) {
                        return v;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => panic!("missed {n} worker events"),
                Err(broadcast::error::RecvError::Closed) => panic!("the worker is gone"),
            }
        }
    })
    .await
}

async fn finished(events: &mut broadcast::Receiver<WorkerEvent>, task_id: &str) -> Outcome {
    next_event(events, "the task to finish", |e| match e {
        WorkerEvent::Finished {
            task_id: id,
            outcome,
        } if id == task_id => Some(outcome.clone()),
        _ => None,
    })
    .await
}

async fn leased_count(c: &Client, queue: &str) -> usize {
    let filter = TaskFilter::new().queue(queue).state(TaskState::Leased);
    let tasks: Vec<_> = c.list_tasks(filter).try_collect().await.expect("list");
    tasks.len()
}

async fn outcomes(c: &Client, task_id: &str) -> Vec<AttemptOutcome> {
    c.list_attempts(task_id)
        .await
        .expect("attempts")
        .iter()
        .map(|a| a.outcome())
        .collect()
}

// Running handlers: the concurrency cap, heartbeats, checkpoints across a crash and panics.
#[path = "worker_runtime/running.rs"]
mod running;
// Stopping handlers: cancel, lost leases and graceful shutdown.
#[path = "worker_runtime/stopping.rs"]
mod stopping;
// Results as function calls, and completions sharing CompleteMany calls.
#[path = "worker_runtime/results.rs"]
mod results;
