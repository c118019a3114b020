//! Attempts: reclaim, the retry policy, checkpoints, deadlines and per-queue lease bounds.

use super::*;

// 4. Reclaim: an expired lease is a failed attempt through the retry policy, and a
// task that keeps timing out ends DEAD.
async fn expired_leases_are_reclaimed_and_end_dead_after_max_attempts(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let id = submit_one(
        &mut c,
        pb::TaskSpec {
            retry: retry_now(2),
            ..spec("reclaim")
        },
    )
    .await;
    let first = lease_one(&mut c, "reclaim").await;
    assert_eq!(app.reap().await.reclaimed, 0, "lease still valid");
    app.advance(Duration::from_secs(31));
    assert_eq!(app.reap().await.reclaimed, 1);
    let task = get(&mut admin, &id).await;
    assert_eq!(state(&task), pb::TaskState::Ready);
    assert_eq!(task.last_error, "lease expired");
    // The old token is dead now.
    let late = c
        .complete(pb::CompleteRequest {
            task_id: id.clone(),
            lease_token: first.lease_token,
            result: vec![],
            lease_next: None,
        })
        .await
        .unwrap_err();
    assert_eq!(error_reason(&late).as_deref(), Some("LEASE_LOST"));

    let second = lease_one(&mut c, "reclaim").await;
    assert_eq!(second.attempt, 2);
    assert!(second.fencing_token > first.fencing_token);
    app.advance(Duration::from_secs(31));
    assert_eq!(app.reap().await.reclaimed, 1);
    let task = get(&mut admin, &id).await;
    assert_eq!(state(&task), pb::TaskState::Dead);
    assert!(lease(&mut c, "reclaim", 1).await.is_empty());
    let outcomes: Vec<i32> = admin
        .list_attempts(pb::ListAttemptsRequest { task_id: id })
        .await
        .unwrap()
        .into_inner()
        .attempts
        .iter()
        .map(|a| a.outcome)
        .collect();
    assert_eq!(
        outcomes,
        [
            pb::AttemptOutcome::LeaseExpired as i32,
            pb::AttemptOutcome::LeaseExpired as i32
        ]
    );
}

// 5. Retry: exponential backoff, retry_after override, non_retryable and exhaustion.
async fn failures_follow_the_retry_policy(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let id = submit_one(
        &mut c,
        pb::TaskSpec {
            retry: Some(pb::RetryPolicy {
                max_attempts: 4,
                initial_backoff: secs(10),
                backoff_multiplier: 3.0,
                max_backoff: secs(60),
                jitter: Some(0.0),
                ..Default::default()
            }),
            ..spec("retry")
        },
    )
    .await;
    let fail = async |c: &mut _, retry_after: Option<prost_types::Duration>| {
        let t = lease_one(c, "retry").await;
        let r = c
            .fail(pb::FailRequest {
                task_id: id.clone(),
                lease_token: t.lease_token,
                error_message: format!("failure {}", t.attempt),
                retry_after,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        (t.attempt, r)
    };
    let now = app.clock.now_utc();
    let (attempt, r) = fail(&mut c, None).await;
    assert_eq!(attempt, 1);
    assert_eq!(r.state, pb::TaskState::Scheduled as i32);
    assert_eq!(from_ts(&r.next_run_at), now + chrono::Duration::seconds(10));
    assert!(
        lease(&mut c, "retry", 1).await.is_empty(),
        "not before the backoff"
    );

    app.advance(Duration::from_secs(10));
    let now = app.clock.now_utc();
    let (attempt, r) = fail(&mut c, None).await;
    assert_eq!(attempt, 2);
    assert_eq!(from_ts(&r.next_run_at), now + chrono::Duration::seconds(30));

    app.advance(Duration::from_secs(30));
    let now = app.clock.now_utc();
    let (_, r) = fail(&mut c, secs(2)).await;
    assert_eq!(
        from_ts(&r.next_run_at),
        now + chrono::Duration::seconds(2),
        "retry_after wins"
    );

    app.advance(Duration::from_secs(2));
    let (attempt, r) = fail(&mut c, None).await;
    assert_eq!(attempt, 4);
    assert_eq!(r.state, pb::TaskState::Dead as i32, "budget spent");
    assert!(r.next_run_at.is_none());
    let task = get(&mut admin, &id).await;
    assert_eq!(task.last_error, "failure 4");

    // non_retryable goes straight to DEAD, keeping the error.
    let id = submit_one(&mut c, spec("fatal")).await;
    let t = lease_one(&mut c, "fatal").await;
    let r = c
        .fail(pb::FailRequest {
            task_id: id.clone(),
            lease_token: t.lease_token,
            error_message: "bad input".into(),
            non_retryable: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.state, pb::TaskState::Dead as i32);
    let task = get(&mut admin, &id).await;
    assert_eq!(state(&task), pb::TaskState::Dead);
    assert_eq!(task.last_error, "bad input");
    assert!(task.finished_at.is_some());
}

// 6. Checkpoint: durable, handed to the next attempt, size-limited.
async fn checkpoint_is_handed_to_the_next_attempt(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    let id = submit_one(
        &mut c,
        pb::TaskSpec {
            retry: retry_now(3),
            ..spec("cp")
        },
    )
    .await;
    let first = lease_one(&mut c, "cp").await;
    assert!(!first.has_checkpoint);
    let r = c
        .checkpoint(pb::CheckpointRequest {
            task_id: id.clone(),
            lease_token: first.lease_token.clone(),
            checkpoint: b"step-3".to_vec(),
            extend_by: secs(60),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(from_ts(&r.lease_expires_at) > from_ts(&first.lease_expires_at));
    let too_big = c
        .checkpoint(pb::CheckpointRequest {
            task_id: id.clone(),
            lease_token: first.lease_token.clone(),
            checkpoint: vec![0; (1 << 20) + 1],
            extend_by: None,
        })
        .await
        .unwrap_err();
    assert_eq!(too_big.code(), Code::ResourceExhausted);
    assert_eq!(bad_field(&too_big).as_deref(), Some("checkpoint"));

    c.fail(pb::FailRequest {
        task_id: id.clone(),
        lease_token: first.lease_token,
        error_message: "crash".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let second = lease_one(&mut c, "cp").await;
    assert_eq!(second.attempt, 2);
    assert!(second.has_checkpoint);
    assert_eq!(second.checkpoint, b"step-3");
}

// 7. Deadline: DEAD with DEADLINE_EXCEEDED; no lease past it; expiry capped at it.
async fn deadlines_cap_leases_and_kill_late_tasks(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let now = app.clock.now_utc();
    let deadline = now + chrono::Duration::seconds(10);
    let leased_id = submit_one(
        &mut c,
        pb::TaskSpec {
            deadline: ts(deadline),
            ..spec("dl")
        },
    )
    .await;
    let t = lease_one(&mut c, "dl").await;
    assert_eq!(
        from_ts(&t.lease_expires_at),
        deadline,
        "expiry capped at the deadline"
    );
    let hb = c
        .heartbeat(pb::HeartbeatRequest {
            worker_id: "w1".into(),
            leases: vec![pb::LeaseRef {
                task_id: leased_id.clone(),
                lease_token: t.lease_token.clone(),
            }],
            extend_by: secs(3600),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(from_ts(&hb.leases[0].lease_expires_at), deadline);

    let waiting_id = submit_one(
        &mut c,
        pb::TaskSpec {
            deadline: ts(deadline),
            run_at: ts(now + chrono::Duration::seconds(5)),
            ..spec("dl2")
        },
    )
    .await;
    app.advance(Duration::from_secs(10));
    assert!(
        lease(&mut c, "dl2", 1).await.is_empty(),
        "never leased at or past the deadline"
    );
    assert_eq!(app.reap().await.deadline_exceeded, 2);
    for id in [&leased_id, &waiting_id] {
        let task = get(&mut admin, id).await;
        assert_eq!(state(&task), pb::TaskState::Dead);
        assert_eq!(task.last_error, "DEADLINE_EXCEEDED");
    }
    let attempts = admin
        .list_attempts(pb::ListAttemptsRequest { task_id: leased_id })
        .await
        .unwrap()
        .into_inner()
        .attempts;
    assert_eq!(
        attempts[0].outcome,
        pb::AttemptOutcome::DeadlineExceeded as i32
    );
}

// 3c. Per-queue lease bounds ([queues.X] min_lease / max_lease) hold in Lease,
// Heartbeat and Checkpoint.
async fn per_queue_lease_bounds_hold_in_every_lease_call(b: Backend) {
    use taskbroker_server::domain::RetryPolicy;
    use taskbroker_server::service::{QueueSettings, Settings};
    let mut settings = Settings::default();
    settings.queues.insert(
        "short".into(),
        QueueSettings {
            max_leases_per_worker: 0,
            retry: RetryPolicy::default(),
            max_payload_bytes: 1 << 20,
            min_lease: Duration::from_secs(2),
            max_lease: Duration::from_secs(10),
            retention: Duration::ZERO,
        },
    );
    let Some(app) = spawn_app_with(
        b,
        Options {
            settings,
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let id = submit_one(&mut c, spec("short")).await;
    submit_one(&mut c, spec("long")).await;
    let field = |s: tonic::Status| {
        assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
        bad_field(&s).unwrap()
    };
    let mut too_long = lease_req("short", 1);
    too_long.lease_duration = secs(60);
    assert_eq!(
        field(c.lease(too_long).await.unwrap_err()),
        "lease_duration"
    );
    let mut mixed = lease_req("long", 1);
    mixed.queues.push("short".into());
    mixed.lease_duration = secs(20);
    assert_eq!(field(c.lease(mixed).await.unwrap_err()), "lease_duration");
    // Without a duration, the default (30 s) is brought inside the queue's bounds.
    let now = app.clock.now_utc();
    let mut default = lease_req("short", 1);
    default.lease_duration = None;
    let t = c.lease(default).await.unwrap().into_inner().tasks.remove(0);
    assert_eq!(t.task_id, id);
    assert_eq!(
        from_ts(&t.lease_expires_at),
        now + chrono::Duration::seconds(10)
    );
    let before = get(&mut admin, &id).await;
    let hb = c
        .heartbeat(pb::HeartbeatRequest {
            worker_id: "w1".into(),
            leases: vec![pb::LeaseRef {
                task_id: id.clone(),
                lease_token: t.lease_token.clone(),
            }],
            extend_by: secs(60),
        })
        .await
        .unwrap_err();
    assert_eq!(field(hb), "extend_by");
    let cp = c
        .checkpoint(pb::CheckpointRequest {
            task_id: id.clone(),
            lease_token: t.lease_token.clone(),
            checkpoint: b"cp".to_vec(),
            extend_by: secs(60),
        })
        .await
        .unwrap_err();
    assert_eq!(field(cp), "extend_by");
    assert_eq!(get(&mut admin, &id).await, before, "nothing changed");
    let ok = c
        .checkpoint(pb::CheckpointRequest {
            task_id: id.clone(),
            lease_token: t.lease_token.clone(),
            checkpoint: b"cp".to_vec(),
            extend_by: secs(8),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        from_ts(&ok.lease_expires_at),
        now + chrono::Duration::seconds(8)
    );
    // Other queues keep the broker's bounds.
    let mut long = lease_req("long", 1);
    long.lease_duration = secs(600);
    assert_eq!(c.lease(long).await.unwrap().into_inner().tasks.len(), 1);
}

all_backends!(
    per_queue_lease_bounds_hold_in_every_lease_call,
    expired_leases_are_reclaimed_and_end_dead_after_max_attempts,
    failures_follow_the_retry_policy,
    checkpoint_is_handed_to_the_next_attempt,
    deadlines_cap_leases_and_kill_late_tasks
);
