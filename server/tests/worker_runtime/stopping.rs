//! Stopping handlers: cancel, lost leases and graceful shutdown.

use super::*;

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

all_backends!(
    cancel_reaches_a_running_handler_at_the_next_heartbeat,
    a_lost_lease_stops_the_handler_and_nothing_is_reported,
    graceful_stop_finishes_running_tasks_and_hands_back_the_rest
);
