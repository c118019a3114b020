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

// ---- concurrency ----

async fn concurrency_cap_is_respected_and_only_free_slots_are_leased(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let c = client(&app).await;
    const TASKS: usize = 12;
    const CAP: usize = 4;
    for i in 0..TASKS {
        c.submit(TaskSpec::new("cap", format!("{i}")))
            .await
            .unwrap();
    }
    let running = Arc::new(AtomicUsize::new(0));
    let max_running = Arc::new(AtomicUsize::new(0));
    // Each permit lets one handler finish.
    let gate = Arc::new(Semaphore::new(0));
    let (started_tx, mut started) = mpsc::unbounded_channel::<String>();
    let handler = {
        let (running, max_running, gate) = (running.clone(), max_running.clone(), gate.clone());
        move |ctx: TaskContext| {
            let (running, max_running, gate, started_tx) = (
                running.clone(),
                max_running.clone(),
                gate.clone(),
                started_tx.clone(),
            );
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                max_running.fetch_max(now, Ordering::SeqCst);
                started_tx.send(ctx.task_id().to_string()).unwrap();
                gate.acquire().await.expect("gate open").forget();
                running.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, TaskError>(())
            }
        }
    };
    let worker = Worker::builder(c.clone())
        .queue("cap", handler)
        .concurrency(CAP)
        .build();
    let mut events = worker.subscribe();
    let w = start(worker);

    for _ in 0..CAP {
        within("a handler to start", started.recv()).await.unwrap();
    }
    assert_eq!(
        leased_count(&c, "cap").await,
        CAP,
        "no lease beyond the running handlers"
    );
    // Free one slot at a time: each time exactly one more task is leased.
    for _ in CAP..TASKS {
        gate.add_permits(1);
        within("the next handler to start", started.recv())
            .await
            .unwrap();
        assert_eq!(
            leased_count(&c, "cap").await,
            CAP,
            "leased only the freed slot"
        );
    }
    gate.add_permits(CAP);
    let mut completed = 0;
    while completed < TASKS {
        let outcome = next_event(&mut events, "tasks to finish", |e| match e {
            WorkerEvent::Finished { outcome, .. } => Some(outcome.clone()),
            WorkerEvent::Leased { asked, .. } => {
                assert!(
                    *asked as usize <= CAP,
                    "asked for {asked} tasks with {CAP} slots"
                );
                None
            }
            _ => None,
        })
        .await;
        assert_eq!(outcome, Outcome::Completed);
        completed += 1;
    }
    assert_eq!(
        max_running.load(Ordering::SeqCst),
        CAP,
        "ran up to, never beyond, the cap"
    );
    let done: Vec<_> = c
        .list_tasks(TaskFilter::new().queue("cap").state(TaskState::Succeeded))
        .try_collect()
        .await
        .unwrap();
    assert_eq!(done.len(), TASKS);
    w.stop().await.unwrap();
}

// ---- heartbeats ----

async fn batched_heartbeats_keep_tasks_alive_well_past_their_lease(b: Backend) {
    let Some(app) = spawn_real_clock(b).await else {
        return;
    };
    let c = client(&app).await;
    let ids = [
        c.submit(TaskSpec::new("hb", "one")).await.unwrap().task_id,
        c.submit(TaskSpec::new("hb", "two")).await.unwrap().task_id,
    ];
    let gate = Arc::new(Semaphore::new(0));
    let handler = {
        let gate = gate.clone();
        move |_ctx: TaskContext| {
            let gate = gate.clone();
            async move {
                gate.acquire().await.expect("gate open").forget();
                Ok::<_, TaskError>("survived")
            }
        }
    };
    // Wide enough that a heartbeat delayed by a busy 2-core machine is not a lost lease.
    let lease = Duration::from_secs(3);
    let worker = Worker::builder(c.clone())
        .queue("hb", handler)
        .concurrency(2)
        .lease_duration(lease)
        .build();
    let mut events = worker.subscribe();
    let w = start(worker);

    let mut first_expiry = None;
    let mut beats = 0;
    loop {
        // Only beats naming both leases count: one call extends every running task.
        let leases = next_event(&mut events, "a heartbeat naming both tasks", |e| match e {
            WorkerEvent::Heartbeat { leases } if leases.len() == 2 => Some(leases.clone()),
            _ => None,
        })
        .await;
        for l in &leases {
            assert!(ids.contains(&l.task_id));
            assert!(!l.lost, "the lease of {} was lost", l.task_id);
        }
        let task = c.get_task(&ids[0]).await.unwrap();
        assert_eq!(task.state(), TaskState::Leased);
        assert_eq!(task.attempt, 1, "never reclaimed and leased again");
        let expiry = leases[0]
            .lease_expires_at
            .expect("live leases have an expiry");
        let first = *first_expiry.get_or_insert(expiry);
        beats += 1;
        // Stop once the broker's own clock is a full lease past the first extended
        // expiry: without these beats the reaper would have reclaimed the tasks.
        if beats >= 4 && expiry >= first + 2 * lease {
            break;
        }
    }
    gate.add_permits(2);
    for id in &ids {
        let result = c.wait(id, GUARD).await.unwrap();
        assert_eq!(result, b"survived");
        assert_eq!(
            outcomes(&c, id).await,
            [AttemptOutcome::Succeeded],
            "one attempt only"
        );
    }
    w.stop().await.unwrap();
}

// ---- checkpoints across a crash ----

fn resumable(
    crash: Option<oneshot::Sender<()>>,
) -> impl Fn(TaskContext) -> std::pin::Pin<Box<dyn Future<Output = Result<String, TaskError>> + Send>>
+ Send
+ Sync
+ 'static {
    let crash = Arc::new(std::sync::Mutex::new(crash));
    move |ctx: TaskContext| {
        let crash = crash.clone();
        Box::pin(async move {
            let start: u32 = match ctx.last_checkpoint() {
                Some(cp) => String::from_utf8(cp).unwrap().parse().unwrap(),
                None => 0,
            };
            let total: u32 = String::from_utf8_lossy(ctx.payload()).parse().unwrap();
            for item in start..total {
                ctx.checkpoint((item + 1).to_string()).await?;
                if item + 1 == 3 {
                    let signal = crash.lock().unwrap().take();
                    if let Some(signal) = signal {
                        // Progress is saved; now hang until the worker is killed.
                        signal.send(()).unwrap();
                        std::future::pending::<()>().await;
                    }
                }
            }
            Ok(format!("attempt {} resumed at {start}", ctx.attempt()))
        })
    }
}

async fn a_killed_worker_is_resumed_from_its_checkpoint(b: Backend) {
    let Some(app) = spawn_real_clock(b).await else {
        return;
    };
    let c = client(&app).await;
    let spec = TaskSpec::new("resume", "10")
        .max_attempts(3)
        .initial_backoff(Duration::ZERO);
    let id = c.submit(spec).await.unwrap().task_id;

    let (crashed_tx, crashed) = oneshot::channel();
    let first = Worker::builder(c.clone())
        .queue("resume", resumable(Some(crashed_tx)))
        .lease_duration(Duration::from_secs(1))
        .build();
    let first = start(first);
    within("the first worker to reach item 3", crashed)
        .await
        .unwrap();
    // Kill it: no Fail, no more heartbeats; the broker only sees the lease run out.
    first.handle.abort();
    assert!(first.handle.await.unwrap_err().is_cancelled());

    let second = Worker::builder(c.clone())
        .queue("resume", resumable(None))
        .lease_duration(Duration::from_secs(1))
        .build();
    let second = start(second);
    let result = c.wait(&id, GUARD).await.unwrap();
    assert_eq!(String::from_utf8(result).unwrap(), "attempt 2 resumed at 3");
    assert_eq!(
        outcomes(&c, &id).await,
        [AttemptOutcome::LeaseExpired, AttemptOutcome::Succeeded]
    );
    second.stop().await.unwrap();
}

// ---- panics ----

async fn a_panic_fails_the_task_with_its_message_and_the_worker_lives_on(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let c = client(&app).await;
    let handler = |ctx: TaskContext| async move {
        if ctx.payload() == b"panic" {
            panic!("boom at item 42");
        }
        Ok::<_, TaskError>("still alive")
    };
    let w = start(
        Worker::builder(c.clone())
            .queue("panics", handler)
            .concurrency(1)
            .build(),
    );
    let boom = c
        .submit(TaskSpec::new("panics", "panic").max_attempts(1))
        .await
        .unwrap()
        .task_id;
    match c.wait(&boom, GUARD).await {
        Err(Error::TaskFailed { state, error, .. }) => {
            assert_eq!(state, TaskState::Dead);
            assert!(error.contains("boom at item 42"), "{error}");
        }
        other => panic!("expected the task to fail, got {other:?}"),
    }
    assert_eq!(outcomes(&c, &boom).await, [AttemptOutcome::Failed]);
    let ok = c
        .submit_and_wait(TaskSpec::new("panics", "fine"), GUARD)
        .await
        .unwrap();
    assert_eq!(ok, b"still alive");
    w.stop().await.expect("the worker survived the panic");
}

// ---- cancel and lost leases ----

/// A handler that reports its start and then why it was cancelled.
fn waits_for_cancel(
    started: mpsc::UnboundedSender<String>,
    reasons: mpsc::UnboundedSender<Option<CancelReason>>,
) -> impl Fn(
    TaskContext,
) -> std::pin::Pin<Box<dyn Future<Output = Result<&'static str, TaskError>> + Send>>
+ Send
+ Sync
+ 'static {
    move |ctx: TaskContext| {
        let (started, reasons) = (started.clone(), reasons.clone());
        Box::pin(async move {
            started.send(ctx.task_id().to_string()).unwrap();
            ctx.cancelled().await;
            reasons.send(ctx.cancel_reason()).unwrap();
            match ctx.cancel_reason() {
                Some(CancelReason::LeaseLost) => Ok("finished too late"),
                _ => Err(TaskError::retry("stopped on request")),
            }
        })
    }
}

async fn cancel_reaches_a_running_handler_at_the_next_heartbeat(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let c = client(&app).await;
    let id = c
        .submit(TaskSpec::new("cancel", "x").max_attempts(5))
        .await
        .unwrap()
        .task_id;
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (reason_tx, mut reasons) = mpsc::unbounded_channel();
    let worker = Worker::builder(c.clone())
        .queue("cancel", waits_for_cancel(started_tx, reason_tx))
        .lease_duration(Duration::from_secs(3))
        .build();
    let mut events = worker.subscribe();
    let w = start(worker);
    assert_eq!(
        within("the handler to start", started.recv())
            .await
            .unwrap(),
        id
    );

    let task = c.cancel_task(&id).await.unwrap();
    assert!(task.cancel_requested && task.state() == TaskState::Leased);
    // Forget what happened before the cancel; at most one beat already in flight may
    // still say no, the first beat sent afterwards must deliver it.
    while events.try_recv().is_ok() {}
    let mut beats_before = 0;
    let reason = within("the handler to be cancelled", async {
        loop {
            tokio::select! {
                r = reasons.recv() => return r.unwrap(),
                e = events.recv() => {
                    if let Ok(WorkerEvent::Heartbeat { leases }) = e
                        && leases.iter().any(|l| l.task_id == id && !l.cancel_requested)
                    {
                        beats_before += 1;
                    }
                }
            }
        }
    })
    .await;
    assert_eq!(reason, Some(CancelReason::CancelRequested));
    assert!(
        beats_before <= 1,
        "{beats_before} heartbeats passed before the cancel arrived"
    );
    match c.wait(&id, GUARD).await {
        Err(Error::TaskFailed { state, .. }) => assert_eq!(state, TaskState::Cancelled),
        other => panic!("expected CANCELLED, got {other:?}"),
    }
    w.stop().await.unwrap();
}

async fn a_lost_lease_stops_the_handler_and_nothing_is_reported(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let c = client(&app).await;
    let id = c
        .submit(TaskSpec::new("lost", "x").max_attempts(1))
        .await
        .unwrap()
        .task_id;
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (reason_tx, mut reasons) = mpsc::unbounded_channel();
    let worker = Worker::builder(c.clone())
        .queue("lost", waits_for_cancel(started_tx, reason_tx))
        .lease_duration(Duration::from_secs(3))
        .build();
    let mut events = worker.subscribe();
    let w = start(worker);
    within("the handler to start", started.recv())
        .await
        .unwrap();

    // The broker's clock passes the lease: the reaper reclaims the task.
    app.advance(Duration::from_secs(4));
    assert_eq!(app.reap().await.reclaimed, 1);
    let reason = within("the handler to be cancelled", reasons.recv())
        .await
        .unwrap();
    assert_eq!(reason, Some(CancelReason::LeaseLost));
    assert_eq!(finished(&mut events, &id).await, Outcome::Abandoned);
    let task = c.get_task(&id).await.unwrap();
    assert_eq!(task.state(), TaskState::Dead);
    assert_eq!(task.last_error, "lease expired");
    assert!(task.result.is_empty(), "the late result was not reported");
    assert_eq!(outcomes(&c, &id).await, [AttemptOutcome::LeaseExpired]);
    w.stop().await.unwrap();
}

// ---- shutdown ----

async fn graceful_stop_finishes_running_tasks_and_hands_back_the_rest(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let c = client(&app).await;
    let first = |p: &str| {
        TaskSpec::new("stop", p.to_string())
            .priority(1)
            .max_attempts(3)
    };
    let finishing = c.submit(first("finish")).await.unwrap().task_id;
    let hanging = c.submit(first("hang")).await.unwrap().task_id;
    let waiting = c
        .submit(TaskSpec::new("stop", "wait"))
        .await
        .unwrap()
        .task_id;

    let release = Arc::new(Semaphore::new(0));
    let (started_tx, mut started) = mpsc::unbounded_channel::<()>();
    let handler = {
        let release = release.clone();
        move |ctx: TaskContext| {
            let (release, started_tx) = (release.clone(), started_tx.clone());
            async move {
                started_tx.send(()).unwrap();
                if ctx.payload() == b"hang" {
                    // Ignores cancellation: only the end of the grace period stops it.
                    std::future::pending::<()>().await;
                }
                release.acquire().await.expect("open").forget();
                Ok::<_, TaskError>("finished")
            }
        }
    };
    let worker = Worker::builder(c.clone())
        .queue("stop", handler)
        .concurrency(2)
        .shutdown_grace(Duration::from_secs(3))
        .build();
    let mut events = worker.subscribe();
    let w = start(worker);
    for _ in 0..2 {
        within("both handlers to start", started.recv())
            .await
            .unwrap();
    }

    let _ = w.stop.send(());
    next_event(&mut events, "leasing to stop", |e| {
        matches!(e, WorkerEvent::Stopping).then_some(())
    })
    .await;
    // Within the grace period the finishing handler completes normally.
    release.add_permits(1);
    within("the worker to stop", w.handle)
        .await
        .unwrap()
        .unwrap();

    assert_eq!(leased_count(&c, "stop").await, 0, "no task left LEASED");
    let done = c.get_task(&finishing).await.unwrap();
    assert_eq!(done.state(), TaskState::Succeeded);
    assert_eq!(done.result, b"finished");
    let handed_back = c.get_task(&hanging).await.unwrap();
    assert_eq!(handed_back.state(), TaskState::Ready, "retryable, at once");
    assert_eq!(handed_back.last_error, "worker stopped");
    assert_eq!(handed_back.attempt, 1);
    let untouched = c.get_task(&waiting).await.unwrap();
    assert_eq!(
        (untouched.state(), untouched.attempt),
        (TaskState::Ready, 0)
    );
}

// ---- results as function calls ----

async fn submit_and_wait_returns_the_workers_result_or_final_error(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let c = client(&app).await;
    let upper = |ctx: TaskContext| async move {
        match ctx.payload() {
            b"bad" => Err(TaskError::permanent("bad input")),
            p => Ok(String::from_utf8_lossy(p).to_uppercase()),
        }
    };
    let sum = |ctx: TaskContext| async move {
        let numbers: Vec<i64> = ctx.json()?;
        if ctx.attempt() == 1 {
            // Retried at once, as asked, instead of after the policy's backoff.
            return Err(TaskError::retry_after("flaky", Duration::ZERO));
        }
        Ok(Json(
            serde_json::json!({ "sum": numbers.iter().sum::<i64>(), "attempt": ctx.attempt() }),
        ))
    };
    let w = start(
        Worker::builder(c.clone())
            .queue("upper", upper)
            .queue("sum", sum)
            .build(),
    );
    let result = c
        .submit_and_wait(TaskSpec::new("upper", "hello"), GUARD)
        .await
        .unwrap();
    assert_eq!(result, b"HELLO");

    match c
        .submit_and_wait(TaskSpec::new("upper", "bad"), GUARD)
        .await
    {
        Err(Error::TaskFailed { state, error, .. }) => {
            assert_eq!(state, TaskState::Dead, "permanent: no retry");
            assert_eq!(error, "bad input");
        }
        other => panic!("expected the task to fail, got {other:?}"),
    }

    let spec = TaskSpec::json("sum", &[1, 2, 3])
        .unwrap()
        .max_attempts(2)
        .initial_backoff(Duration::from_secs(3600));
    let got: serde_json::Value =
        serde_json::from_slice(&c.submit_and_wait(spec, GUARD).await.unwrap()).unwrap();
    assert_eq!(got, serde_json::json!({ "sum": 6, "attempt": 2 }));

    // A task nobody works on: the wait gives up, the task is untouched.
    let id = c
        .submit(TaskSpec::new("nobody", "x"))
        .await
        .unwrap()
        .task_id;
    match c.wait(&id, Duration::from_millis(100)).await {
        Err(Error::Timeout { state, .. }) => assert_eq!(state, TaskState::Ready),
        other => panic!("expected a timeout, got {other:?}"),
    }
    w.stop().await.unwrap();
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

// Completions that finish together share CompleteMany calls; each task still
// ends SUCCEEDED with its own result and one attempt.
async fn completions_finishing_together_share_calls(b: Backend) {
    let Some(app) = spawn_app_with(
        b,
        Options {
            metrics: true,
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    let c = client(&app).await;
    const TASKS: usize = 40;
    const SLOTS: usize = 20;
    let mut ids = Vec::new();
    for i in 0..TASKS {
        ids.push(
            c.submit(TaskSpec::new("many", format!("{i}")))
                .await
                .unwrap()
                .task_id,
        );
    }
    // Handlers wait at a gate, so a whole set of slots finishes at once.
    let gate = Arc::new(Semaphore::new(0));
    let (started_tx, mut started) = mpsc::unbounded_channel::<()>();
    let handler = {
        let gate = gate.clone();
        move |ctx: TaskContext| {
            let (gate, started_tx) = (gate.clone(), started_tx.clone());
            async move {
                started_tx.send(()).unwrap();
                gate.acquire().await.expect("gate open").forget();
                Ok::<_, TaskError>(ctx.task_id().as_bytes().to_vec())
            }
        }
    };
    let worker = Worker::builder(c.clone())
        .queue("many", handler)
        .concurrency(SLOTS)
        .build();
    let mut events = worker.subscribe();
    let w = start(worker);
    for _ in 0..SLOTS {
        within("the first handlers to start", started.recv())
            .await
            .unwrap();
    }
    gate.add_permits(TASKS);
    for _ in 0..TASKS {
        let outcome = next_event(&mut events, "tasks to finish", |e| match e {
            WorkerEvent::Finished { outcome, .. } => Some(outcome.clone()),
            _ => None,
        })
        .await;
        assert_eq!(outcome, Outcome::Completed);
    }
    w.stop().await.unwrap();
    for id in &ids {
        let t = c.get_task(id).await.unwrap();
        assert_eq!(t.state(), TaskState::Succeeded);
        assert_eq!(t.result, id.as_bytes(), "each task kept its own result");
        assert_eq!(outcomes(&c, id).await, vec![AttemptOutcome::Succeeded]);
    }
    let many = ok_calls(&app, "CompleteMany").await;
    let single = ok_calls(&app, "Complete").await;
    assert!(many >= 1, "no CompleteMany call ({single} Complete calls)");
    assert!(
        (many + single) < TASKS as u64,
        "{many} CompleteMany + {single} Complete calls for {TASKS} tasks"
    );
}

all_backends!(
    completions_finishing_together_share_calls,
    concurrency_cap_is_respected_and_only_free_slots_are_leased,
    batched_heartbeats_keep_tasks_alive_well_past_their_lease,
    a_killed_worker_is_resumed_from_its_checkpoint,
    a_panic_fails_the_task_with_its_message_and_the_worker_lives_on,
    cancel_reaches_a_running_handler_at_the_next_heartbeat,
    a_lost_lease_stops_the_handler_and_nothing_is_reported,
    graceful_stop_finishes_running_tasks_and_hands_back_the_rest,
    submit_and_wait_returns_the_workers_result_or_final_error,
);
