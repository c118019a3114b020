//! The Rust worker runtime with lease_next: a slot whose task settles
//! gets its next task in the same Complete or Fail call and runs it; every task
//! runs exactly once, none is dropped (a dropped one would stay LEASED: the broker
//! runs on the manual clock, so its lease never runs out and the test gets stuck),
//! and the long-poll Lease is left for when no task came back.

mod common;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Backend, Options, TestApp, spawn_app_with};
use taskbroker_client::pb::{AttemptOutcome, TaskState};
use taskbroker_client::worker::Outcome;
use taskbroker_client::{Client, Error, TaskContext, TaskError, TaskSpec, Worker, WorkerEvent};
use tokio::sync::{Semaphore, broadcast, oneshot};
use tokio::task::JoinHandle;

const GUARD: Duration = Duration::from_secs(60);

async fn within<F: Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(GUARD, f).await {
        Ok(v) => v,
        Err(_) => panic!("stuck: {what} did not happen within {GUARD:?}"),
    }
}

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
    async fn stop(self) {
        let _ = self.stop.send(());
        within("the worker to stop", self.handle)
            .await
            .expect("the worker's task does not panic")
            .expect("the worker stops cleanly");
    }
}

/// Calls of one gRPC method the broker answered OK, from its Prometheus metrics.
async fn ok_calls(app: &TestApp, method: &str) -> u64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = app.metrics_addr.expect("metrics are on");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    let prefix = format!(
        "taskbroker_rpc_duration_seconds_count{{method=\"/taskbroker.v1.BrokerService/{method}\",code=\"OK\"}} "
    );
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|n| n.trim().parse().unwrap())
        .unwrap_or(0)
}

/// Waits for `n` Finished events; returns the outcomes, the Started count and how
/// many of those tasks came from Lease calls (the rest came with settles).
async fn finish(
    events: &mut broadcast::Receiver<WorkerEvent>,
    n: usize,
) -> (HashMap<String, Outcome>, usize, usize) {
    let mut done = HashMap::new();
    let mut started = 0;
    let mut from_lease = 0;
    within("every task to finish", async {
        while done.len() < n {
            match events.recv().await {
                Ok(WorkerEvent::Started { .. }) => started += 1,
                Ok(WorkerEvent::Leased { count, .. }) => from_lease += count,
                Ok(WorkerEvent::Finished { task_id, outcome }) => {
                    assert!(
                        done.insert(task_id.clone(), outcome).is_none(),
                        "{task_id} finished twice"
                    );
                }
                Ok(_) => {}
                Err(e) => panic!("worker events: {e}"),
            }
        }
    })
    .await;
    (done, started, from_lease)
}

type Runs = Arc<Mutex<HashMap<String, usize>>>;

/// Counts runs per task; payload "bad" fails for good.
fn counting(
    runs: Runs,
) -> impl Fn(TaskContext) -> std::pin::Pin<Box<dyn Future<Output = Result<(), TaskError>> + Send>>
+ Send
+ Sync
+ 'static {
    move |ctx: TaskContext| {
        let runs = runs.clone();
        Box::pin(async move {
            *runs
                .lock()
                .unwrap()
                .entry(ctx.task_id().to_string())
                .or_default() += 1;
            if ctx.payload() == b"bad" {
                return Err(TaskError::permanent("bad"));
            }
            Ok(())
        })
    }
}

async fn one_slot_runs_each_task_once_leasing_through_its_settles(b: Backend) {
    let opts = Options {
        metrics: true,
        ..Default::default()
    };
    let Some(app) = spawn_app_with(b, opts).await else {
        return;
    };
    let c = Client::connect(app.url()).await.expect("connect");
    const TASKS: usize = 24;
    let mut ids = Vec::new();
    for i in 0..TASKS {
        // Every fourth fails (a Fail that carries lease_next).
        let payload = if i % 4 == 3 {
            "bad".to_string()
        } else {
            format!("{i}")
        };
        ids.push(
            c.submit(TaskSpec::new("chain", payload))
                .await
                .unwrap()
                .task_id,
        );
    }
    let runs: Runs = Arc::default();
    let worker = Worker::builder(c.clone())
        .queue("chain", counting(runs.clone()))
        .concurrency(1)
        .build();
    let mut events = worker.subscribe();
    let w = start(worker);
    let (done, started, from_lease) = finish(&mut events, TASKS).await;
    w.stop().await;
    assert_eq!(started, TASKS, "each task started once");
    assert_eq!(from_lease, 1, "the others came with the settles");
    let runs = runs.lock().unwrap().clone();
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(runs.get(id), Some(&1), "{id} ran once");
        let t = c.get_task(id).await.unwrap();
        let attempts: Vec<AttemptOutcome> = c
            .list_attempts(id)
            .await
            .unwrap()
            .iter()
            .map(|a| a.outcome())
            .collect();
        if i % 4 == 3 {
            assert!(matches!(done[id], Outcome::Failed { .. }));
            assert_eq!(t.state(), TaskState::Dead);
            assert_eq!(attempts, [AttemptOutcome::Failed]);
        } else {
            assert_eq!(done[id], Outcome::Completed);
            assert_eq!(t.state(), TaskState::Succeeded);
            assert_eq!(attempts, [AttemptOutcome::Succeeded]);
        }
    }
    // The tasks came with the settles: the first Lease found one, and the
    // long-poll after the last settle was still waiting when the worker stopped.
    let leases = ok_calls(&app, "Lease").await;
    let settles = ok_calls(&app, "Complete").await + ok_calls(&app, "Fail").await;
    assert!(leases <= 2, "{leases} Lease calls for {TASKS} tasks");
    assert_eq!(settles, TASKS as u64);
}

async fn slots_settling_together_share_the_next_tasks(b: Backend) {
    let opts = Options {
        metrics: true,
        ..Default::default()
    };
    let Some(app) = spawn_app_with(b, opts).await else {
        return;
    };
    let c = Client::connect(app.url()).await.expect("connect");
    const TASKS: usize = 60;
    const SLOTS: usize = 12;
    let mut ids = Vec::new();
    for i in 0..TASKS {
        ids.push(
            c.submit(TaskSpec::new("shared", format!("{i}")))
                .await
                .unwrap()
                .task_id,
        );
    }
    // Handlers wait at a gate, so whole sets of slots settle at once (CompleteMany
    // with one lease_next for the batch).
    let gate = Arc::new(Semaphore::new(0));
    let runs: Runs = Arc::default();
    let handler = {
        let (gate, runs) = (gate.clone(), runs.clone());
        move |ctx: TaskContext| {
            let (gate, runs) = (gate.clone(), runs.clone());
            async move {
                *runs
                    .lock()
                    .unwrap()
                    .entry(ctx.task_id().to_string())
                    .or_default() += 1;
                gate.acquire().await.expect("gate open").forget();
                Ok::<_, TaskError>(())
            }
        }
    };
    let worker = Worker::builder(c.clone())
        .queue("shared", handler)
        .concurrency(SLOTS)
        .build();
    let mut events = worker.subscribe();
    let w = start(worker);
    gate.add_permits(TASKS);
    let (done, started, from_lease) = finish(&mut events, TASKS).await;
    w.stop().await;
    assert_eq!(started, TASKS, "each task started once");
    assert!(from_lease < TASKS, "some tasks came with the settles");
    assert!(done.values().all(|o| *o == Outcome::Completed));
    let runs = runs.lock().unwrap().clone();
    for id in &ids {
        assert_eq!(runs.get(id), Some(&1), "{id} ran once");
        assert_eq!(c.get_task(id).await.unwrap().state(), TaskState::Succeeded);
    }
    let many = ok_calls(&app, "CompleteMany").await;
    assert!(many >= 1, "no CompleteMany call");
}

all_backends!(
    one_slot_runs_each_task_once_leasing_through_its_settles,
    slots_settling_together_share_the_next_tasks,
);
