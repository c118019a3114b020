//! The client fault scenario (`clients/conformance/FAULTS.md`) for the Rust client,
//! against the broker at `$TASKBROKER_ADDR`, which `scripts/conformance.sh rust --faults`
//! kills, restarts and pauses on request through the control FIFOs
//! `$TASKBROKER_FAULT_CTL` and `$TASKBROKER_FAULT_ACK`.
//!
//! Prints `PASS case` or `FAIL case: reason` per case, then `N passed, M failed`, and
//! exits non-zero when any case failed.

use std::collections::HashMap;
use std::future::Future;
use std::io::{BufRead, Write};
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use taskbroker_client::pb::TaskState;
use taskbroker_client::worker::Json;
use taskbroker_client::{CancelReason, Client, TaskContext, TaskError, TaskSpec, Worker};
use tokio::sync::{Notify, Semaphore, oneshot};
use tokio::time::Instant;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

#[path = "../common/meter.rs"]
mod meter;

const WORKER_ID: &str = "conf-rust";
const CASE_TIMEOUT: Duration = Duration::from_secs(90);
/// What a stop may take past its timeout (docs/client-spec.md point 11).
const STOP_MARGIN: Duration = Duration::from_secs(2);

type Outcome = Result<(), String>;
type Case = fn(Client, String) -> Pin<Box<dyn Future<Output = Outcome> + Send>>;

fn check(cond: bool, reason: impl Into<String>) -> Outcome {
    if cond { Ok(()) } else { Err(reason.into()) }
}

fn at<T, E: std::fmt::Display>(step: &str, r: Result<T, E>) -> Result<T, String> {
    r.map_err(|e| format!("{step}: {e}"))
}

/// Asks scripts/conformance.sh to do `command` to the broker; returns once it is done.
/// Blocking file I/O on the FIFOs, so it runs on the blocking pool.
async fn fault(command: &'static str) -> Outcome {
    let reply = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
        let ctl = std::env::var("TASKBROKER_FAULT_CTL").unwrap_or_default();
        let ack = std::env::var("TASKBROKER_FAULT_ACK").unwrap_or_default();
        std::fs::OpenOptions::new()
            .write(true)
            .open(ctl)?
            .write_all(format!("{command}\n").as_bytes())?;
        let mut line = String::new();
        std::io::BufReader::new(std::fs::File::open(ack)?).read_line(&mut line)?;
        Ok(line.trim().to_string())
    })
    .await
    .map_err(|e| format!("fault {command}: {e}"))?
    .map_err(|e| format!("fault {command}: {e}"))?;
    check(reply == "ok", format!("fault {command}: {reply}"))
}

/// The WARN events the worker logged, as `field=value` text, to count those naming a task.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

impl Warnings {
    fn naming(&self, task_id: &str) -> Vec<String> {
        let all = self.0.lock().unwrap();
        all.iter()
            .filter(|w| w.contains(task_id))
            .cloned()
            .collect()
    }
}

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={:?}", field.name(), value));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN
            && event.metadata().target().starts_with("taskbroker_client")
        {
            let mut f = Fields(String::new());
            event.record(&mut f);
            self.0.lock().unwrap().push(f.0);
        }
    }
}

static WARNINGS: std::sync::OnceLock<Warnings> = std::sync::OnceLock::new();

/// A worker running in the background; `stop` asks it to drain and waits for `run`.
struct Running {
    stop: Option<oneshot::Sender<()>>,
    run: tokio::task::JoinHandle<Result<(), taskbroker_client::Error>>,
}

impl Running {
    fn start(w: Worker) -> Self {
        let (tx, rx) = oneshot::channel::<()>();
        let run = tokio::spawn(w.run(async move {
            let _ = rx.await;
        }));
        Running {
            stop: Some(tx),
            run,
        }
    }

    async fn stop(mut self) -> Result<(), String> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match tokio::time::timeout(Duration::from_secs(60), &mut self.run).await {
            Ok(Ok(r)) => at("Worker::run", r),
            Ok(Err(e)) => Err(format!("Worker::run: {e}")),
            Err(_) => Err("the worker did not stop within 60 s".into()),
        }
    }
}

async fn get(c: &Client, id: &str) -> Result<taskbroker_client::pb::Task, String> {
    at("GetTask", c.get_task(id).await)
}

async fn restart_mid_settle(c: Client, q: String) -> Outcome {
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            at(
                "Submit",
                c.submit(TaskSpec::new(q.clone(), b"x".to_vec())).await,
            )?
            .task_id,
        );
    }
    let started = Arc::new(Semaphore::new(0));
    let release = Arc::new(Notify::new());
    let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let runs = Arc::new(AtomicUsize::new(0));
    let (s, r, rd, n) = (
        started.clone(),
        release.clone(),
        released.clone(),
        runs.clone(),
    );
    let w = Worker::builder(c.clone())
        .worker_id(WORKER_ID)
        .concurrency(3)
        .lease_duration(Duration::from_secs(30))
        .queue(q, move |_ctx: TaskContext| {
            let (s, r, rd, n) = (s.clone(), r.clone(), rd.clone(), n.clone());
            async move {
                n.fetch_add(1, Ordering::SeqCst);
                let notified = r.notified();
                s.add_permits(1);
                if !rd.load(Ordering::SeqCst) {
                    notified.await;
                }
                Ok::<_, TaskError>("done")
            }
        })
        .build();
    let running = Running::start(w);
    let outcome = async {
        at(
            "awaiting the handlers",
            tokio::time::timeout(Duration::from_secs(20), started.acquire_many(3)).await,
        )?
        .map_err(|e| e.to_string())?
        .forget();
        fault("kill").await?;
        released.store(true, Ordering::SeqCst);
        release.notify_waiters();
        // The outage itself (FAULTS.md): longer than five quick retries take.
        tokio::time::sleep(Duration::from_secs(4)).await;
        fault("start").await?;
        for id in &ids {
            let _ = c.wait(id, Duration::from_secs(25)).await;
            let t = get(&c, id).await?;
            check(
                t.state() == TaskState::Succeeded && t.attempt == 1 && t.result == b"done",
                format!(
                    "task {id} is {:?} attempt {} (last error {:?}), want SUCCEEDED attempt 1 result done",
                    t.state(),
                    t.attempt,
                    t.last_error
                ),
            )?;
        }
        let n = runs.load(Ordering::SeqCst);
        check(n == 3, format!("the handler ran {n} times for 3 tasks"))
    }
    .await;
    released.store(true, Ordering::SeqCst);
    release.notify_waiters();
    let stopped = running.stop().await;
    outcome.and(stopped)
}

async fn paused_past_lease(c: Client, q: String) -> Outcome {
    let id = at(
        "Submit",
        c.submit(
            TaskSpec::new(q.clone(), b"x".to_vec())
                .max_attempts(3)
                .initial_backoff(Duration::ZERO),
        )
        .await,
    )?
    .task_id;
    let started = Arc::new(Notify::new());
    let (told_tx, told_rx) = oneshot::channel::<(Option<CancelReason>, Instant)>();
    let told_tx = Arc::new(Mutex::new(Some(told_tx)));
    let (st, tt) = (started.clone(), told_tx.clone());
    let lease = Duration::from_secs(2);
    let w = Worker::builder(c.clone())
        .worker_id(WORKER_ID)
        .concurrency(1)
        .lease_duration(lease)
        .queue(q, move |ctx: TaskContext| {
            let (st, tt) = (st.clone(), tt.clone());
            async move {
                if ctx.attempt() > 1 {
                    return Ok::<_, TaskError>("second");
                }
                st.notify_one();
                let _ = tokio::time::timeout(Duration::from_secs(20), ctx.cancelled()).await;
                if let Some(tx) = tt.lock().unwrap().take() {
                    let _ = tx.send((ctx.cancel_reason(), Instant::now()));
                }
                Ok("late")
            }
        })
        .build();
    let running = Running::start(w);
    let outcome = async {
        at(
            "awaiting the handler",
            tokio::time::timeout(Duration::from_secs(20), started.notified()).await,
        )?;
        let paused_at = Instant::now();
        fault("pause").await?;
        let told = tokio::time::timeout(Duration::from_secs(20), told_rx).await;
        fault("resume").await?;
        let (reason, at_) = at("awaiting the handler's cancellation", told)?
            .map_err(|e| format!("the handler ended without a cancellation: {e}"))?;
        check(
            reason == Some(CancelReason::LeaseLost),
            format!("the handler was cancelled with {reason:?}, want LeaseLost"),
        )?;
        let after = at_ - paused_at;
        check(
            after <= lease + Duration::from_secs(1),
            format!(
                "the handler was told {after:?} after the pause, want within the 2 s lease + 1 s"
            ),
        )?;
        let _ = c.wait(&id, Duration::from_secs(20)).await;
        let t = get(&c, &id).await?;
        check(
            t.state() == TaskState::Succeeded && t.attempt == 2 && t.result == b"second",
            format!(
                "task is {:?} attempt {} result {:?}, want SUCCEEDED attempt 2 second",
                t.state(),
                t.attempt,
                String::from_utf8_lossy(&t.result)
            ),
        )?;
        let warns = WARNINGS.get().map(|w| w.naming(&id)).unwrap_or_default();
        check(
            warns.len() == 1,
            format!(
                "{} WARN lines name the task, want 1: {warns:?}",
                warns.len()
            ),
        )
    }
    .await;
    let stopped = running.stop().await;
    outcome.and(stopped)
}

async fn stop_bound(c: Client, q: String) -> Outcome {
    let id = at(
        "Submit",
        c.submit(TaskSpec::new(q.clone(), b"x".to_vec())).await,
    )?
    .task_id;
    let started = Arc::new(Notify::new());
    let st = started.clone();
    let stop_timeout = Duration::from_secs(2);
    let w = Worker::builder(c.clone())
        .worker_id(WORKER_ID)
        .concurrency(1)
        .shutdown_grace(stop_timeout)
        .queue(q, move |_ctx: TaskContext| {
            let st = st.clone();
            async move {
                st.notify_one();
                // Ignores its cancellation.
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok::<_, TaskError>("ignored")
            }
        })
        .build();
    let running = Running::start(w);
    at(
        "awaiting the handler",
        tokio::time::timeout(Duration::from_secs(20), started.notified()).await,
    )?;
    let t0 = Instant::now();
    running.stop().await?;
    let took = t0.elapsed();
    let bound = stop_timeout + STOP_MARGIN + Duration::from_secs(1);
    check(
        took <= bound,
        format!("stop took {took:?}, want at most {bound:?}"),
    )?;
    let t = get(&c, &id).await?;
    check(
        t.state() == TaskState::Ready && t.attempt == 1,
        format!(
            "after the stop the task is {:?} attempt {}, want READY attempt 1 (handed back)",
            t.state(),
            t.attempt
        ),
    )
}

async fn wrong_result_type(c: Client, q: String) -> Outcome {
    let id = at(
        "Submit",
        c.submit(TaskSpec::new(q.clone(), b"x".to_vec()).max_attempts(1))
            .await,
    )?
    .task_id;
    let w = Worker::builder(c.clone())
        .worker_id(WORKER_ID)
        .queue(q, |_ctx: TaskContext| async {
            // JSON object keys must be strings: this map cannot be encoded.
            let m: HashMap<(u8, u8), u8> = HashMap::from([((1, 2), 3)]);
            Ok::<_, TaskError>(Json(m))
        })
        .build();
    let running = Running::start(w);
    let _ = c.wait(&id, Duration::from_secs(10)).await;
    let t = get(&c, &id).await;
    let stopped = running.stop().await;
    let t = t?;
    check(
        t.state() == TaskState::Dead,
        format!(
            "task is {:?}, want DEAD (failed at once, 1 attempt)",
            t.state()
        ),
    )?;
    check(
        t.last_error.contains("JSON") && t.last_error.contains("key must be a string"),
        format!(
            "last_error {:?} does not say why the result could not be encoded",
            t.last_error
        ),
    )?;
    stopped
}

async fn http_port(_c: Client, q: String) -> Outcome {
    let addr =
        std::env::var("TASKBROKER_HTTP_ADDR").map_err(|_| "TASKBROKER_HTTP_ADDR is not set")?;
    let http = at("connect", Client::builder(addr).connect_lazy())?;
    let w = Worker::builder(http)
        .worker_id(WORKER_ID)
        .queue(q, |_ctx: TaskContext| async { Ok::<_, TaskError>(()) })
        .build();
    match tokio::time::timeout(Duration::from_secs(20), w.run(std::future::pending())).await {
        Ok(Err(_)) => Ok(()),
        Ok(Ok(())) => Err("the worker against the HTTP port returned Ok, want an error".into()),
        Err(_) => Err("the worker against the HTTP port still runs after 20 s".into()),
    }
}

/// Completions that finish while a settle call hangs go together in one CompleteMany.
async fn settle_batching(c: Client, q: String) -> Outcome {
    const N: usize = 10;
    let mut ids = Vec::new();
    for i in 0..N {
        let spec = TaskSpec::new(q.clone(), format!("{i}").into_bytes());
        ids.push(at("Submit", c.submit(spec).await)?.task_id);
    }
    let readings = meter::Readings::new();
    let started = Arc::new(AtomicUsize::new(0));
    let all_started = Arc::new(Notify::new());
    let latch = Arc::new(Semaphore::new(0));
    let (st, all, l) = (started.clone(), all_started.clone(), latch.clone());
    let w = Worker::builder(c.clone())
        .worker_id(WORKER_ID)
        .concurrency(N)
        .meter(readings.meter())
        .queue(q, move |_ctx: TaskContext| {
            let (st, all, l) = (st.clone(), all.clone(), l.clone());
            async move {
                if st.fetch_add(1, Ordering::SeqCst) + 1 == N {
                    all.notify_one();
                }
                let _permit = l.acquire().await;
                Ok::<_, TaskError>("done")
            }
        })
        .build();
    let mut events = w.subscribe();
    let running = Running::start(w);
    let outcome = async {
        at(
            "awaiting 10 running handlers",
            tokio::time::timeout(Duration::from_secs(30), all_started.notified()).await,
        )?;
        fault("pause").await?;
        latch.add_permits(N);
        let handed = tokio::time::timeout(Duration::from_secs(20), async {
            let mut n = 0;
            while n < N {
                match events.recv().await {
                    Ok(taskbroker_client::WorkerEvent::SettleQueued { .. }) => n += 1,
                    Ok(_) => {}
                    Err(e) => return Err(format!("worker events: {e}")),
                }
            }
            Ok(())
        })
        .await;
        fault("resume").await?;
        at("awaiting the 10 completions in the settle queue", handed)??;
        for id in &ids {
            let _ = c.wait(id, Duration::from_secs(20)).await;
            let t = get(&c, id).await?;
            check(
                t.state() == TaskState::Succeeded && t.attempt == 1,
                format!("task {id} is {:?} attempt {}, want SUCCEEDED attempt 1", t.state(), t.attempt),
            )?;
        }
        let single = readings.count("taskbroker.worker.settle.calls", &[("rpc", "Complete")]);
        let many = readings.count("taskbroker.worker.settle.calls", &[("rpc", "CompleteMany")]);
        // The first call leaves with what had queued when the completer woke (one
        // completion as a Complete, or several, up to all ten, as a CompleteMany);
        // all the rest follow it in one CompleteMany.
        check(
            single + many <= 2 && many >= 1,
            format!(
                "{single} Complete and {many} CompleteMany calls, want 1 or 2 calls, a CompleteMany among them"
            ),
        )
    }
    .await;
    latch.add_permits(N);
    let stopped = running.stop().await;
    outcome.and(stopped)
}

fn cases() -> Vec<(&'static str, Case)> {
    vec![
        ("restart_mid_settle", |c, q| {
            Box::pin(restart_mid_settle(c, q))
        }),
        ("paused_past_lease", |c, q| {
            Box::pin(paused_past_lease(c, q))
        }),
        ("stop_bound", |c, q| Box::pin(stop_bound(c, q))),
        ("wrong_result_type", |c, q| {
            Box::pin(wrong_result_type(c, q))
        }),
        ("http_port", |c, q| Box::pin(http_port(c, q))),
        ("settle_batching", |c, q| Box::pin(settle_batching(c, q))),
    ]
}

fn suffix() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..4)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

#[tokio::main]
async fn main() -> ExitCode {
    let warnings = WARNINGS.get_or_init(Warnings::default).clone();
    tracing_subscriber::registry()
        .with(warnings)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(tracing_subscriber::EnvFilter::new("taskbroker_client=info")),
        )
        .init();
    if std::env::var("TASKBROKER_FAULT_CTL").is_err() {
        eprintln!("TASKBROKER_FAULT_CTL is not set: run scripts/conformance.sh rust --faults");
        return ExitCode::from(2);
    }
    let addr = std::env::var("TASKBROKER_ADDR").unwrap_or_else(|_| "127.0.0.1:50051".into());
    let client = match Client::builder(addr).connect_lazy() {
        Ok(c) => c,
        Err(e) => {
            println!("FAIL connect: {e}");
            println!("0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
    };
    let (mut passed, mut failed) = (0, 0);
    for (name, case) in cases() {
        let queue = format!("conf.rust.{name}.{}", suffix());
        let outcome = match tokio::time::timeout(CASE_TIMEOUT, case(client.clone(), queue)).await {
            Ok(r) => r,
            Err(_) => Err(format!("did not finish within {CASE_TIMEOUT:?}")),
        };
        match outcome {
            Ok(()) => {
                passed += 1;
                println!("PASS {name}");
            }
            Err(reason) => {
                failed += 1;
                println!("FAIL {name}: {reason}");
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
