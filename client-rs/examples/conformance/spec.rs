//! The client-library cases of SCENARIO.md (docs/client-spec.md points 1 to 7): they
//! drive the `Worker` runtime and the client's helpers rather than the raw calls.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use taskbroker_client::pb::{self, TaskState};
use taskbroker_client::time::to_proto_duration;
use taskbroker_client::worker::{self, defaults};
use taskbroker_client::{CancelReason, Client, Error, TaskContext, TaskError, TaskSpec, Worker};
use tokio::sync::{Notify, oneshot};

use super::{Outcome, WORKER_ID, at, check};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn worker(c: &Client, q: &str) -> worker::WorkerBuilder {
    Worker::builder(c.clone())
        .worker_id(WORKER_ID)
        .lease_wait(Duration::from_secs(1))
        .queue(q, |_ctx: TaskContext| async { Ok::<_, TaskError>(()) })
}

async fn wait_state(c: &Client, id: &str, want: TaskState) -> Result<TaskState, String> {
    let end = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let s = at("GetTask", c.get_task(id).await)?.state();
        if s == want || tokio::time::Instant::now() > end {
            return Ok(s);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn spec_defaults(c: Client, q: String) -> Outcome {
    let w = Worker::builder(c)
        .queue(q, |_ctx: TaskContext| async { Ok::<_, TaskError>(()) })
        .build();
    let got = w.settings();
    let want = (
        4,
        Duration::from_secs(30),
        Duration::from_secs(10),
        Duration::from_secs(10),
        Duration::from_secs(30),
    );
    check(got == want, format!("defaults {got:?}, want {want:?}"))?;
    check(defaults::CONCURRENCY == 4, "defaults::CONCURRENCY is not 4")?;
    check(
        worker::backoff_ceiling(0) == Duration::from_millis(200)
            && worker::backoff_ceiling(10) == Duration::from_secs(10),
        "backoff ceilings are not 200 ms and 10 s",
    )?;
    let draws: Vec<Duration> = (0..50).map(|_| worker::backoff_delay(3)).collect();
    check(
        draws
            .iter()
            .all(|d| *d >= Duration::from_millis(160) && *d <= Duration::from_millis(1600)),
        format!("backoff_delay(3) outside [160 ms, 1.6 s]: {draws:?}"),
    )?;
    check(
        draws.iter().any(|d| *d != draws[0]),
        "backoff_delay(3) has no jitter",
    )?;
    for code in [
        tonic::Code::Unauthenticated,
        tonic::Code::PermissionDenied,
        tonic::Code::InvalidArgument,
        tonic::Code::Unimplemented,
    ] {
        let e = Error::from(tonic::Status::new(code, "x"));
        check(
            worker::stops_worker(&e),
            format!("stops_worker({code:?}) false"),
        )?;
    }
    let e = Error::from(tonic::Status::unavailable("x"));
    check(!worker::stops_worker(&e), "stops_worker(UNAVAILABLE) true")
}

pub async fn lease_lost_reason(c: Client, q: String) -> Outcome {
    at(
        "Submit",
        c.submit(TaskSpec::new(q.clone(), Vec::new())).await,
    )?;
    let tasks = at(
        "Lease",
        c.lease(pb::LeaseRequest {
            labels: Default::default(),
            worker_id: WORKER_ID.into(),
            queues: vec![q],
            max_tasks: 1,
            lease_duration: Some(to_proto_duration(Duration::from_secs(30))),
            wait: None,
        })
        .await,
    )?;
    let t = tasks.first().ok_or("no task leased")?;
    let e = c
        .complete(pb::CompleteRequest {
            task_id: t.task_id.clone(),
            lease_token: "stale".into(),
            result: Vec::new(),
            lease_next: None,
        })
        .await
        .err()
        .ok_or("Complete with a stale token succeeded")?;
    check(e.is_lease_lost(), format!("is_lease_lost false for {e}"))?;
    let bare = Error::from(tonic::Status::aborted("aborted for another reason"));
    check(
        !bare.is_lease_lost(),
        "is_lease_lost true for a bare ABORTED",
    )
}

pub async fn checkpoint_extends(c: Client, q: String) -> Outcome {
    let id = at(
        "Submit",
        c.submit(TaskSpec::new(q.clone(), Vec::new())).await,
    )?
    .task_id;
    let seen: Arc<Mutex<Vec<Option<SystemTime>>>> = Arc::default();
    let s = seen.clone();
    let w = worker(&c, &q)
        .lease_duration(Duration::from_secs(4))
        .queue(q.clone(), move |ctx: TaskContext| {
            let s = s.clone();
            async move {
                let leased = ctx.lease_expires_at();
                tokio::time::sleep(Duration::from_millis(100)).await;
                ctx.checkpoint(b"half".to_vec())
                    .await
                    .map_err(TaskError::retry)?;
                let after = ctx.lease_expires_at();
                s.lock().unwrap().extend([leased, after]);
                Ok::<_, TaskError>("ok")
            }
        })
        .build();
    let (stop, stopped) = oneshot::channel::<()>();
    let run = tokio::spawn(w.run(async {
        let _ = stopped.await;
    }));
    let state = wait_state(&c, &id, TaskState::Succeeded).await;
    let _ = stop.send(());
    let _ = run.await;
    check(state? == TaskState::Succeeded, "the task did not succeed")?;
    let seen = seen.lock().unwrap().clone();
    check(
        matches!(seen.as_slice(), [Some(a), Some(b)] if b > a),
        format!("expiry {seen:?}: the checkpoint did not extend the lease"),
    )
}

pub async fn deadline_cancels(c: Client, q: String) -> Outcome {
    at(
        "Submit",
        c.submit(TaskSpec::new(q.clone(), Vec::new()).deadline_in(Duration::from_secs(2)))
            .await,
    )?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Option<CancelReason>>(1);
    let w = worker(&c, &q)
        .queue(q.clone(), move |ctx: TaskContext| {
            let tx = tx.clone();
            async move {
                let _ = tokio::time::timeout(Duration::from_secs(20), ctx.cancelled()).await;
                let _ = tx.send(ctx.cancel_reason()).await;
                Err::<(), _>(TaskError::retry("cancelled"))
            }
        })
        .build();
    let (stop, stopped) = oneshot::channel::<()>();
    let run = tokio::spawn(w.run(async {
        let _ = stopped.await;
    }));
    let mut rx = rx;
    let got = tokio::time::timeout(Duration::from_secs(25), rx.recv()).await;
    let _ = stop.send(());
    let _ = run.await;
    let reason = got.map_err(|_| "the handler never ran".to_string())?;
    check(
        reason == Some(Some(CancelReason::Deadline)),
        format!("cancel reason {reason:?}, want Deadline"),
    )
}

async fn run_until_stopped(w: Worker) -> Result<Result<(), Error>, String> {
    tokio::time::timeout(Duration::from_secs(20), w.run(std::future::pending()))
        .await
        .map_err(|_| "the worker kept running".to_string())
}

pub async fn stop_codes(c: Client, q: String) -> Outcome {
    let r = run_until_stopped(worker(&c, "has space").build()).await?;
    check(
        r.as_ref().err().and_then(Error::code) == Some(tonic::Code::InvalidArgument),
        format!("bad queue: run ended {r:?}, want INVALID_ARGUMENT"),
    )?;
    if std::env::var("TASKBROKER_TOKEN").is_err() {
        return Ok(());
    }
    let addr = std::env::var("TASKBROKER_ADDR").unwrap_or_default();
    let bad = at(
        "connect",
        match Client::builder(addr).env_settings() {
            Ok(b) => b.bearer_token("wrong-token-0123456789").connect().await,
            Err(e) => Err(e),
        },
    )?;
    let r = run_until_stopped(worker(&bad, &q).build()).await?;
    check(
        r.as_ref().err().and_then(Error::code) == Some(tonic::Code::Unauthenticated),
        format!("wrong token: run ended {r:?}, want UNAUTHENTICATED"),
    )
}

pub async fn drain_on_sigterm(c: Client, q: String) -> Outcome {
    let a = at(
        "Submit",
        c.submit(TaskSpec::new(q.clone(), b"a".to_vec())).await,
    )?
    .task_id;
    let running = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let (r, rel) = (running.clone(), release.clone());
    let w = worker(&c, &q)
        .concurrency(1)
        .queue(q.clone(), move |_ctx: TaskContext| {
            let (r, rel) = (r.clone(), rel.clone());
            async move {
                r.notify_one();
                rel.notified().await;
                Ok::<_, TaskError>("done")
            }
        })
        .build();
    let run = tokio::spawn(w.run_until_signal());
    tokio::time::timeout(Duration::from_secs(20), running.notified())
        .await
        .map_err(|_| "the handler never ran".to_string())?;
    let b = at(
        "Submit",
        c.submit(TaskSpec::new(q.clone(), b"b".to_vec())).await,
    )?
    .task_id;
    let pid = std::process::id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .map_err(|e| format!("kill: {e}"))?;
    check(killed.success(), "kill -TERM failed")?;
    // The signal arrives asynchronously; give the runtime a moment to stop leasing.
    tokio::time::sleep(Duration::from_millis(300)).await;
    release.notify_one();
    let ended = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .map_err(|_| "run did not return after SIGTERM".to_string())?;
    check(
        matches!(ended, Ok(Ok(()))),
        format!("run ended {ended:?}, want Ok"),
    )?;
    let sa = at("GetTask", c.get_task(&a).await)?.state();
    let sb = at("GetTask", c.get_task(&b).await)?.state();
    check(
        sa == TaskState::Succeeded && sb == TaskState::Ready,
        format!("a {sa:?}, b {sb:?}; want Succeeded, Ready"),
    )
}

pub async fn trace_propagation(c: Client, q: String) -> Outcome {
    let sc = SpanContext::new(
        TraceId::from_hex(TRACE_ID).map_err(|e| e.to_string())?,
        SpanId::from_hex("00f067aa0ba902b7").map_err(|e| e.to_string())?,
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    let cx = opentelemetry::Context::new().with_remote_span_context(sc);
    let submit = opentelemetry::context::FutureExt::with_context(
        c.submit(TaskSpec::new(q.clone(), Vec::new())),
        cx,
    );
    let id = at("Submit", submit.await)?.task_id;
    let task = at("GetTask", c.get_task(&id).await)?;
    let tp = task.metadata.get("traceparent").cloned();
    check(
        tp.as_deref() == Some(TRACEPARENT),
        format!("metadata traceparent {tp:?}, want {TRACEPARENT}"),
    )?;
    let (tx, rx) = tokio::sync::mpsc::channel::<String>(1);
    let w = worker(&c, &q)
        .queue(q.clone(), move |_ctx: TaskContext| {
            let tx = tx.clone();
            async move {
                let cx = opentelemetry::Context::current();
                let id = cx.span().span_context().trace_id().to_string();
                let _ = tx.send(id).await;
                Ok::<_, TaskError>(())
            }
        })
        .build();
    let (stop, stopped) = oneshot::channel::<()>();
    let run = tokio::spawn(w.run(async {
        let _ = stopped.await;
    }));
    let mut rx = rx;
    let got = tokio::time::timeout(Duration::from_secs(20), rx.recv()).await;
    let _ = stop.send(());
    let _ = run.await;
    let got = got.map_err(|_| "the handler never ran".to_string())?;
    check(
        got.as_deref() == Some(TRACE_ID),
        format!("handler saw trace id {got:?}, want {TRACE_ID}"),
    )
}
