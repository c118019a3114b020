//! Running handlers: the concurrency cap, heartbeats, checkpoints across a crash and panics.

use super::*;

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

all_backends!(
    concurrency_cap_is_respected_and_only_free_slots_are_leased,
    batched_heartbeats_keep_tasks_alive_well_past_their_lease,
    a_killed_worker_is_resumed_from_its_checkpoint,
    a_panic_fails_the_task_with_its_message_and_the_worker_lives_on
);
