//! End-to-end tests of the policy declared with a Rust handler (docs/client-spec.md
//! point 20) and of `TaskDef`, against a real broker over gRPC.
//!
//! Nothing here sleeps to wait for something: tests wait for worker events and
//! channels; `within` only bounds a wait so a broken runtime fails instead of hanging.

mod common;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use common::{Backend, spawn_app};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use taskbroker_client::pb::TaskState;
use taskbroker_client::{
    Client, Error, QueuePolicy, TaskContext, TaskDef, TaskError, TaskFilter, TaskSpec, Worker,
};
use tokio::sync::{Semaphore, mpsc, oneshot};
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

#[derive(Debug)]
struct InvalidAddress;
impl fmt::Display for InvalidAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid address")
    }
}
impl std::error::Error for InvalidAddress {}

#[derive(Debug, Serialize, Deserialize)]
struct Email {
    to: String,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Sent {
    to: String,
    attempt: u32,
}

async fn retry_defaults_fill_what_the_spec_leaves_unset(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let c = Client::connect(app.url()).await.unwrap();
    let ok = |_ctx: TaskContext| async move { Ok::<_, TaskError>(()) };
    // Registering the handler's policy is enough: the producer shares the client.
    let _worker = Worker::builder(c.clone())
        .queue("emails", ok)
        .policy(
            "emails",
            QueuePolicy::new()
                .max_attempts(7)
                .backoff(Duration::from_secs(42)),
        )
        .build();
    let plain = c.submit(TaskSpec::new("emails", "x")).await.unwrap();
    let task = c.get_task(&plain.task_id).await.unwrap();
    assert_eq!(task.max_attempts, 7, "the handler's max_attempts");
    let retry = task.retry.unwrap();
    assert_eq!(retry.initial_backoff.unwrap().seconds, 42);

    let own = c
        .submit(TaskSpec::new("emails", "y").max_attempts(2))
        .await
        .unwrap();
    let task = c.get_task(&own.task_id).await.unwrap();
    assert_eq!(task.max_attempts, 2, "the spec's own retry wins");
    assert_eq!(task.retry.unwrap().initial_backoff.unwrap().seconds, 42);

    let other = c.submit(TaskSpec::new("other", "z")).await.unwrap();
    let task = c.get_task(&other.task_id).await.unwrap();
    assert_eq!(
        task.max_attempts, 3,
        "another queue keeps the broker's default"
    );
}

async fn a_non_retryable_error_type_ends_the_task_dead_at_attempt_one(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let c = Client::connect(app.url()).await.unwrap();
    let send = |ctx: TaskContext| async move {
        match ctx.payload() {
            b"bad" => Err::<(), _>(TaskError::from(InvalidAddress)),
            _ => Err(TaskError::retry_after("flaky", Duration::ZERO)),
        }
    };
    let w = start(
        Worker::builder(c.clone())
            .queue("emails", send)
            .policy(
                "emails",
                QueuePolicy::new()
                    .max_attempts(5)
                    .non_retryable::<InvalidAddress>(),
            )
            .build(),
    );
    let bad = c.submit(TaskSpec::new("emails", "bad")).await.unwrap();
    match within("the bad task", c.wait(&bad.task_id, GUARD)).await {
        Err(Error::TaskFailed { state, error, .. }) => {
            assert_eq!(state, TaskState::Dead);
            assert_eq!(error, "invalid address");
        }
        other => panic!("expected the task to fail, got {other:?}"),
    }
    let task = c.get_task(&bad.task_id).await.unwrap();
    assert_eq!((task.attempt, task.max_attempts), (1, 5), "not retried");

    // Another error is retried under the policy, until its 5 attempts run out.
    let flaky = c.submit(TaskSpec::new("emails", "flaky")).await.unwrap();
    let _ = within("the flaky task", c.wait(&flaky.task_id, GUARD)).await;
    assert_eq!(c.get_task(&flaky.task_id).await.unwrap().attempt, 5);
    w.stop().await;
}

async fn a_queue_with_its_own_slots_runs_that_many_at_once(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let c = Client::connect(app.url()).await.unwrap();
    // Waiting before the worker starts: a shared Lease of 4 slots would take all three.
    for i in 0..3 {
        c.submit(TaskSpec::new("slow", format!("{i}")))
            .await
            .unwrap();
    }
    let gate = Arc::new(Semaphore::new(0));
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (started, mut starts) = mpsc::unbounded_channel::<()>();
    let slow = {
        let (gate, running, most) = (gate.clone(), running.clone(), most.clone());
        move |_ctx: TaskContext| {
            let (gate, running, most, started) =
                (gate.clone(), running.clone(), most.clone(), started.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                let _ = started.send(());
                gate.acquire().await.unwrap().forget();
                running.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, TaskError>(())
            }
        }
    };
    let fast = |ctx: TaskContext| async move { Ok::<_, TaskError>(ctx.payload().to_vec()) };
    let w = start(
        Worker::builder(c.clone())
            .concurrency(4)
            .queue("slow", slow)
            .queue("fast", fast)
            .policy("slow", QueuePolicy::new().concurrency(1))
            .build(),
    );
    within("the first slow task", starts.recv()).await;
    // The other queues keep the shared slots while "slow" is full.
    let out = within(
        "a fast task",
        c.submit_and_wait(TaskSpec::new("fast", "hi"), GUARD),
    )
    .await
    .unwrap();
    assert_eq!(out, b"hi");
    let leased = TaskFilter::new().queue("slow").state(TaskState::Leased);
    let held: Vec<_> = c.list_tasks(leased).try_collect().await.unwrap();
    assert_eq!(held.len(), 1, "one slot: one lease");
    gate.add_permits(3);
    within("the other slow tasks", async {
        starts.recv().await;
        starts.recv().await;
    })
    .await;
    w.stop().await;
    assert_eq!(most.load(Ordering::SeqCst), 1);
}

async fn a_task_def_types_both_sides(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let c = Client::connect(app.url()).await.unwrap();
    let emails: TaskDef<Email, Sent> =
        TaskDef::new("emails").policy(QueuePolicy::new().max_attempts(4));
    let w = start(
        Worker::builder(c.clone())
            .task(&emails, |ctx: TaskContext, e: Email| async move {
                if e.to.is_empty() {
                    return Err(TaskError::permanent("no recipient"));
                }
                Ok(Sent {
                    to: e.to,
                    attempt: ctx.attempt(),
                })
            })
            .build(),
    );
    let sent = emails
        .submit_and_wait(&c, &Email { to: "a@b.c".into() }, GUARD)
        .await
        .unwrap();
    assert_eq!(
        sent,
        Sent {
            to: "a@b.c".into(),
            attempt: 1
        }
    );
    match emails
        .submit_and_wait(&c, &Email { to: String::new() }, GUARD)
        .await
    {
        Err(Error::TaskFailed { state, error, .. }) => {
            assert_eq!(state, TaskState::Dead);
            assert_eq!(error, "no recipient");
        }
        other => panic!("expected the task to fail, got {other:?}"),
    }
    w.stop().await;

    // A client with no worker: the definition's policy and delays still hold.
    let later = emails
        .submit_in(&c, &Email { to: "x".into() }, Duration::from_secs(3600))
        .await
        .unwrap();
    let task = c.get_task(&later.task_id).await.unwrap();
    assert_eq!(task.max_attempts, 4);
    assert_eq!(task.state(), TaskState::Scheduled);
    let at = SystemTime::now() + Duration::from_secs(7200);
    let fixed = emails
        .submit_at(&c, &Email { to: "y".into() }, at)
        .await
        .unwrap();
    let task = c.get_task(&fixed.task_id).await.unwrap();
    let run_at = task.run_at.unwrap().seconds;
    let want = at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64;
    assert!((run_at - want).abs() <= 1, "{run_at} vs {want}");
}

both_backends!(
    retry_defaults_fill_what_the_spec_leaves_unset,
    a_non_retryable_error_type_ends_the_task_dead_at_attempt_one,
    a_queue_with_its_own_slots_runs_that_many_at_once,
    a_task_def_types_both_sides,
);
