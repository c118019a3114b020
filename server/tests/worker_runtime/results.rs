//! Results as function calls, and completions sharing CompleteMany calls.

use super::*;

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
    submit_and_wait_returns_the_workers_result_or_final_error
);
