//! Handlers on a test context and on the fake broker.

use super::*;
use crate::worker::Next;
use crate::{TaskSpec, TaskState};

async fn import(ctx: TaskContext) -> Result<String, TaskError> {
    let done: usize = ctx
        .last_checkpoint()
        .map(|c| String::from_utf8_lossy(&c).parse().unwrap_or(0))
        .unwrap_or(0);
    let rows: usize = String::from_utf8_lossy(ctx.payload())
        .parse()
        .map_err(|_| TaskError::permanent("payload is not a row count"))?;
    for row in done..rows {
        if ctx.is_cancelled() {
            return Err(TaskError::retry("cancelled"));
        }
        ctx.checkpoint((row + 1).to_string()).await?;
    }
    if ctx.metadata().get("flaky").is_some() && ctx.attempt() < 2 {
        return Err(TaskError::retry_after(
            "upstream busy",
            Duration::from_secs(5),
        ));
    }
    Ok(format!("{rows} rows from {}", done))
}

#[tokio::test]
async fn a_handler_runs_on_a_test_context_with_no_broker() {
    let t = TestContext::builder("imports", b"3".to_vec())
        .attempt(2)
        .checkpoint(b"1".to_vec())
        .build();
    assert_eq!(t.context().attempt(), 2);
    assert_eq!(
        t.run(import).await,
        TestOutcome::Completed(b"3 rows from 1".to_vec())
    );
    assert_eq!(t.checkpoints(), vec![b"2".to_vec(), b"3".to_vec()]);
    assert_eq!(t.cancel_checks(), 2);
    assert_eq!(t.context().last_checkpoint(), Some(b"3".to_vec()));

    let t = TestContext::builder("imports", b"1".to_vec())
        .metadata("flaky", "yes")
        .build();
    assert_eq!(
        t.run(import).await,
        TestOutcome::Failed {
            message: "upstream busy".into(),
            retryable: true,
            retry_after: Some(Duration::from_secs(5)),
            cooldown: None,
        }
    );

    let t = TestContext::new("imports", b"many".to_vec());
    assert!(t.run(import).await.is_permanent_failure());
    assert_eq!(
        t.outcome().as_ref().map(TestOutcome::is_permanent_failure),
        Some(true)
    );

    let t = TestContext::builder("imports", b"5".to_vec())
        .cancel_at_checkpoint(2)
        .build();
    assert!(t.run(import).await.is_retryable_failure());
    assert_eq!(t.checkpoints().len(), 2);
    assert_eq!(
        t.context().cancel_reason(),
        Some(CancelReason::CancelRequested)
    );

    let t = TestContext::builder("imports", b"5".to_vec())
        .lose_lease_at_checkpoint(1)
        .build();
    t.run(import).await;
    assert!(t.checkpoints().is_empty());

    let t = TestContext::new("imports", b"5".to_vec());
    t.cancel(CancelReason::ShuttingDown);
    assert!(t.run(import).await.is_retryable_failure());
    assert_eq!(
        t.context().cancel_reason(),
        Some(CancelReason::ShuttingDown)
    );

    let t = TestContext::new("imports", Vec::new());
    let out = t
        .run(|_ctx: TaskContext| async move {
            if true {
                panic!("boom");
            }
            Ok(())
        })
        .await;
    assert_eq!(
        out,
        TestOutcome::Failed {
            message: "panic: boom".into(),
            retryable: true,
            retry_after: None,
            cooldown: None,
        }
    );
}

#[tokio::test]
async fn a_producer_and_a_worker_run_on_the_fake_broker() {
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = seen.clone();
    let broker = FakeBroker::new()
        .middleware(move |ctx, next: Next| {
            counted.fetch_add(1, Ordering::SeqCst);
            next.run(ctx)
        })
        .queue("imports", import)
        .queue_json("double", |_ctx, n: i64| async move { Ok(n * 2) });

    let out = broker
        .submit_and_wait(
            TaskSpec::new("imports", b"2".to_vec()).metadata("flaky", "yes"),
            Duration::from_secs(1),
        )
        .await
        .unwrap();
    // The first attempt failed after its checkpoints; the retry resumed from them.
    assert_eq!(out, b"2 rows from 2");
    let task = &broker.tasks()[0];
    assert_eq!(task.attempts, 2);
    assert_eq!(task.state, TaskState::Succeeded);
    assert_eq!(
        seen.load(Ordering::SeqCst),
        2,
        "the middleware ran around both attempts"
    );

    let n: i64 = broker
        .submit_and_wait_json("double", &21, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(n, 42);

    // A permanent error: one attempt, DEAD.
    let s = broker
        .submit(TaskSpec::new("imports", b"x".to_vec()))
        .await
        .unwrap();
    let e = broker
        .wait(&s.task_id, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::TaskFailed {
                state: TaskState::Dead,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(broker.task(&s.task_id).unwrap().attempts, 1);

    // Retryable errors until max_attempts run out.
    let broker = broker.queue("flaky", |_ctx| async {
        Err::<(), _>(TaskError::retry("down"))
    });
    let s = broker
        .submit(TaskSpec::new("flaky", Vec::new()).max_attempts(4))
        .await
        .unwrap();
    let task = broker.task(&s.task_id).unwrap();
    assert_eq!(
        (task.attempts, task.state, task.last_error.as_str()),
        (4, TaskState::Dead, "down")
    );

    // Same key, same task.
    let a = broker
        .submit(TaskSpec::new("double", b"1".to_vec()).key("k"))
        .await
        .unwrap();
    let b = broker
        .submit(TaskSpec::new("double", b"1".to_vec()).key("k"))
        .await
        .unwrap();
    assert!(b.deduplicated && a.task_id == b.task_id);

    // No handler: the task waits.
    let s = broker
        .submit(TaskSpec::new("nobody", Vec::new()))
        .await
        .unwrap();
    let e = broker
        .wait(&s.task_id, Duration::from_millis(1))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
}

#[tokio::test]
async fn the_outcome_records_the_cooldown_a_handler_asks_for() {
    let t = TestContext::new("mail", b"x".to_vec());
    let outcome = t
        .run(|_ctx: TaskContext| async move {
            Err::<Vec<u8>, _>(
                TaskError::retry("429 from the provider").cool_down_key(Duration::from_secs(90)),
            )
        })
        .await;
    let TestOutcome::Failed { cooldown, .. } = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(
        cooldown,
        Some((
            crate::pb::CooldownScope::ConcurrencyKey,
            Duration::from_secs(90)
        ))
    );
}
