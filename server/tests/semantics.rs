//! End-to-end tests of the numbered semantics in docs/semantics.md, over real gRPC,
//! against both backends. Time moves by the manual clock, never by sleeping.

mod common;

use std::time::Duration;

use common::*;
use taskbroker_client::pb;
use tonic::Code;

// 1. Ordering: priority DESC, deadline ASC (none last), run_at ASC, submission order.
async fn lease_order_is_priority_then_deadline_then_run_at_then_submission(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    let now = app.clock.now_utc();
    let t = |p: &str, prio: i32, deadline_h: Option<i64>, run_at_ago_s: i64| pb::TaskSpec {
        payload: p.as_bytes().to_vec(),
        priority: prio,
        deadline: deadline_h.and_then(|h| ts(now + chrono::Duration::hours(h))),
        run_at: ts(now - chrono::Duration::seconds(run_at_ago_s)),
        ..spec("order")
    };
    submit(
        &mut c,
        vec![
            t("low", -1, None, 0),
            t("plain-late", 0, None, 0),
            t("plain-early", 0, None, 10),
            t("plain-early-second", 0, None, 10),
            t("p5-no-deadline", 5, None, 0),
            t("p5-deadline-2h", 5, Some(2), 0),
            t("p5-deadline-1h", 5, Some(1), 0),
            pb::TaskSpec {
                payload: b"future".to_vec(),
                priority: 100,
                run_at: ts(now + chrono::Duration::hours(1)),
                ..spec("order")
            },
        ],
    )
    .await;
    let got: Vec<String> = lease(&mut c, "order", 100)
        .await
        .into_iter()
        .map(|t| String::from_utf8(t.payload).unwrap())
        .collect();
    assert_eq!(
        got,
        [
            "p5-deadline-1h",
            "p5-deadline-2h",
            "p5-no-deadline",
            "plain-early",
            "plain-early-second",
            "plain-late",
            "low"
        ]
    );
    // The future task becomes leasable once its run_at passes.
    assert!(lease(&mut c, "order", 10).await.is_empty());
    app.advance(Duration::from_secs(3601));
    let later = lease_one(&mut c, "order").await;
    assert_eq!(later.payload, b"future");
}

async fn a_lease_over_several_queues_takes_the_best_of_all(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    let t = |q: &str, p: &str, prio: i32| pb::TaskSpec {
        payload: p.as_bytes().to_vec(),
        priority: prio,
        ..spec(q)
    };
    submit(
        &mut c,
        vec![
            t("qa", "a1", 1),
            t("qb", "b9", 9),
            t("qa", "a5", 5),
            t("qc", "c7", 7),
            t("qb", "b0", 0),
        ],
    )
    .await;
    let mut req = lease_req("qa", 3);
    req.queues = vec!["qa".into(), "qb".into()];
    let got: Vec<String> = c
        .lease(req.clone())
        .await
        .unwrap()
        .into_inner()
        .tasks
        .into_iter()
        .map(|t| String::from_utf8(t.payload).unwrap())
        .collect();
    assert_eq!(got, ["b9", "a5", "a1"], "qc is not asked for");
    let rest: Vec<_> = c.lease(req).await.unwrap().into_inner().tasks;
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].payload, b"b0");
}

// 3. Lease tokens: stale tokens are ABORTED/LEASE_LOST and change nothing.
async fn stale_token_is_aborted_with_lease_lost_and_changes_nothing(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let id = submit_one(&mut c, spec("tokens")).await;
    let leased = lease_one(&mut c, "tokens").await;
    let before = get(&mut admin, &id).await;

    let complete = c
        .complete(pb::CompleteRequest {
            task_id: id.clone(),
            lease_token: "stale".into(),
            result: b"x".to_vec(),
            lease_next: None,
        })
        .await
        .unwrap_err();
    assert_eq!(complete.code(), Code::Aborted);
    assert_eq!(error_reason(&complete).as_deref(), Some("LEASE_LOST"));
    let fail = c
        .fail(pb::FailRequest {
            task_id: id.clone(),
            lease_token: "stale".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(fail.code(), Code::Aborted);
    assert_eq!(error_reason(&fail).as_deref(), Some("LEASE_LOST"));
    let cp = c
        .checkpoint(pb::CheckpointRequest {
            task_id: id.clone(),
            lease_token: "stale".into(),
            checkpoint: b"cp".to_vec(),
            extend_by: None,
        })
        .await
        .unwrap_err();
    assert_eq!(cp.code(), Code::Aborted);
    assert_eq!(get(&mut admin, &id).await, before, "nothing changed");

    // Heartbeat is a batch: the stale lease is marked lost, the valid one extended.
    let hb = c
        .heartbeat(pb::HeartbeatRequest {
            worker_id: "w1".into(),
            leases: vec![
                pb::LeaseRef {
                    task_id: id.clone(),
                    lease_token: "stale".into(),
                },
                pb::LeaseRef {
                    task_id: id.clone(),
                    lease_token: leased.lease_token.clone(),
                },
            ],
            extend_by: secs(120),
        })
        .await
        .unwrap()
        .into_inner()
        .leases;
    assert!(hb[0].lost);
    assert!(!hb[1].lost);
    assert!(from_ts(&hb[1].lease_expires_at) > from_ts(&leased.lease_expires_at));

    // Unknown task ids are NOT_FOUND.
    let missing = c
        .complete(pb::CompleteRequest {
            task_id: "no-such-task".into(),
            lease_token: "t".into(),
            result: vec![],
            lease_next: None,
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
}

async fn repeated_complete_or_fail_with_settling_token_is_ok(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let done = submit_one(&mut c, spec("again")).await;
    let t = lease_one(&mut c, "again").await;
    for _ in 0..2 {
        c.complete(pb::CompleteRequest {
            task_id: done.clone(),
            lease_token: t.lease_token.clone(),
            result: b"r".to_vec(),
            lease_next: None,
        })
        .await
        .expect("complete is idempotent");
    }
    assert_eq!(
        state(&get(&mut admin, &done).await),
        pb::TaskState::Succeeded
    );
    // A Fail with the token that completed the task is not the same report.
    let wrong = c
        .fail(pb::FailRequest {
            task_id: done.clone(),
            lease_token: t.lease_token.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(wrong.code(), Code::Aborted);

    let failed = submit_one(
        &mut c,
        pb::TaskSpec {
            retry: retry_now(3),
            ..spec("again2")
        },
    )
    .await;
    let t = lease_one(&mut c, "again2").await;
    let req = pb::FailRequest {
        task_id: failed.clone(),
        lease_token: t.lease_token.clone(),
        error_message: "boom".into(),
        ..Default::default()
    };
    let first = c.fail(req.clone()).await.unwrap().into_inner();
    let second = c.fail(req).await.unwrap().into_inner();
    assert_eq!(first.state, second.state);
    let attempts = admin
        .list_attempts(pb::ListAttemptsRequest {
            task_id: failed.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .attempts;
    assert_eq!(
        attempts.len(),
        1,
        "the repeat did not count as another failure"
    );
}

// 3b. CompleteMany settles each task as Complete would: live leases complete (with
// their attempts), a repeat is still COMPLETED, a stale token is LEASE_LOST and an
// unknown task NOT_FOUND, in request order; one bad field refuses the whole call.
async fn complete_many_reports_each_task_and_validates_all_or_nothing(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let ids = submit(&mut c, vec![spec("many"), spec("many"), spec("many")]).await;
    let leased = lease(&mut c, "many", 3).await;
    assert_eq!(leased.len(), 3);
    let item = |t: &pb::LeasedTask, token: &str, result: &[u8]| pb::CompleteRequest {
        task_id: t.task_id.clone(),
        lease_token: token.into(),
        result: result.to_vec(),
        lease_next: None,
    };

    // One oversized result, one missing token: refused, nothing settled.
    let max_result = 1024 * 1024;
    let bad = c
        .complete_many(pb::CompleteManyRequest {
            completions: vec![
                item(&leased[0], &leased[0].lease_token, b"ok"),
                item(&leased[1], &leased[1].lease_token, &vec![0; max_result + 1]),
            ],
            lease_next: None,
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::ResourceExhausted);
    assert_eq!(bad_field(&bad).as_deref(), Some("completions[1].result"));
    let bad = c
        .complete_many(pb::CompleteManyRequest {
            completions: vec![
                item(&leased[0], &leased[0].lease_token, b""),
                item(&leased[2], "", b""),
            ],
            lease_next: None,
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert_eq!(
        bad_field(&bad).as_deref(),
        Some("completions[1].lease_token")
    );
    for id in &ids {
        assert_eq!(state(&get(&mut admin, id).await), pb::TaskState::Leased);
    }

    // Settle the first alone, then report all three with one stale token and an
    // unknown task between them.
    c.complete(item(&leased[0], &leased[0].lease_token, b"first"))
        .await
        .expect("complete");
    let unknown = pb::CompleteRequest {
        task_id: "0190a5a0-0000-7000-8000-000000000000".into(),
        lease_token: "t".into(),
        result: Vec::new(),
        lease_next: None,
    };
    let results = c
        .complete_many(pb::CompleteManyRequest {
            completions: vec![
                item(&leased[0], &leased[0].lease_token, b"again"),
                item(&leased[1], "stale-token", b""),
                unknown,
                item(&leased[2], &leased[2].lease_token, b"third"),
            ],
            lease_next: None,
        })
        .await
        .expect("complete many")
        .into_inner()
        .results;
    let outcomes: Vec<(String, pb::CompleteOutcome)> = results
        .iter()
        .map(|r| (r.task_id.clone(), r.outcome()))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            (leased[0].task_id.clone(), pb::CompleteOutcome::Completed),
            (leased[1].task_id.clone(), pb::CompleteOutcome::LeaseLost),
            (
                "0190a5a0-0000-7000-8000-000000000000".into(),
                pb::CompleteOutcome::NotFound
            ),
            (leased[2].task_id.clone(), pb::CompleteOutcome::Completed),
        ]
    );
    let first = get(&mut admin, &leased[0].task_id).await;
    assert_eq!(first.result, b"first", "the repeat changed nothing");
    assert_eq!(
        state(&get(&mut admin, &leased[1].task_id).await),
        pb::TaskState::Leased
    );
    let third = get(&mut admin, &leased[2].task_id).await;
    assert_eq!(state(&third), pb::TaskState::Succeeded);
    assert_eq!(third.result, b"third");
    let attempts = admin
        .list_attempts(pb::ListAttemptsRequest {
            task_id: leased[2].task_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .attempts;
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].outcome(), pb::AttemptOutcome::Succeeded);
    assert!(attempts[0].finished_at.is_some());
}

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

// 8. Idempotent submit per (queue, key), across requests and inside one.
async fn same_key_in_same_queue_is_deduplicated(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let keyed = |q: &str| pb::TaskSpec {
        key: "order-42".into(),
        ..spec(q)
    };
    let r = c
        .submit(pb::SubmitRequest {
            tasks: vec![keyed("idem"), keyed("idem"), keyed("other")],
        })
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(r[0].task_id, r[1].task_id);
    assert!(!r[0].deduplicated && r[1].deduplicated);
    assert_ne!(r[0].task_id, r[2].task_id, "keys are per queue");
    assert!(!r[2].deduplicated);
    let again = c
        .submit(pb::SubmitRequest {
            tasks: vec![keyed("idem")],
        })
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(again[0].task_id, r[0].task_id);
    assert!(again[0].deduplicated);
    let listed = admin
        .list_tasks(pb::ListTasksRequest {
            queue: "idem".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert_eq!(listed.len(), 1, "nothing else was created");
}

// 9. Cancel.
async fn cancel_stops_waiting_tasks_and_asks_running_ones(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let cancel = async |admin: &mut _, id: &str| {
        taskbroker_client::pb::admin_service_client::AdminServiceClient::cancel_task(
            admin,
            pb::CancelTaskRequest { task_id: id.into() },
        )
        .await
        .unwrap()
        .into_inner()
        .task
        .unwrap()
    };
    // Waiting: cancelled at once, never leased; the answer says an operator did it,
    // as GetTask does.
    let waiting = submit_one(&mut c, spec("cancel")).await;
    let answered = cancel(&mut admin, &waiting).await;
    assert_eq!(answered.cancel_reason, pb::CancelReason::Operator as i32);
    assert_eq!(state(&answered), pb::TaskState::Cancelled);
    assert!(lease(&mut c, "cancel", 1).await.is_empty());

    // Running, then Fail: CANCELLED without retry.
    let running = submit_one(
        &mut c,
        pb::TaskSpec {
            retry: retry_now(5),
            ..spec("cancel")
        },
    )
    .await;
    let t = lease_one(&mut c, "cancel").await;
    let task = cancel(&mut admin, &running).await;
    assert_eq!(state(&task), pb::TaskState::Leased);
    assert!(task.cancel_requested);
    let hb = c
        .heartbeat(pb::HeartbeatRequest {
            worker_id: "w1".into(),
            leases: vec![pb::LeaseRef {
                task_id: running.clone(),
                lease_token: t.lease_token.clone(),
            }],
            extend_by: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(hb.leases[0].cancel_requested && !hb.leases[0].lost);
    let cp = c
        .checkpoint(pb::CheckpointRequest {
            task_id: running.clone(),
            lease_token: t.lease_token.clone(),
            checkpoint: b"x".to_vec(),
            extend_by: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(cp.cancel_requested);
    let r = c
        .fail(pb::FailRequest {
            task_id: running.clone(),
            lease_token: t.lease_token,
            error_message: "cancelled by request".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.state, pb::TaskState::Cancelled as i32);

    // Running, then the lease expires: CANCELLED.
    let expiring = submit_one(
        &mut c,
        pb::TaskSpec {
            retry: retry_now(5),
            ..spec("cancel2")
        },
    )
    .await;
    lease_one(&mut c, "cancel2").await;
    cancel(&mut admin, &expiring).await;
    app.advance(Duration::from_secs(31));
    app.reap().await;
    assert_eq!(
        state(&get(&mut admin, &expiring).await),
        pb::TaskState::Cancelled
    );

    // Running, then Complete: the work was done.
    let completed = submit_one(&mut c, spec("cancel3")).await;
    let t = lease_one(&mut c, "cancel3").await;
    cancel(&mut admin, &completed).await;
    c.complete(pb::CompleteRequest {
        task_id: completed.clone(),
        lease_token: t.lease_token,
        result: vec![],
        lease_next: None,
    })
    .await
    .unwrap();
    assert_eq!(
        state(&get(&mut admin, &completed).await),
        pb::TaskState::Succeeded
    );

    // Finished tasks cannot be cancelled.
    let err = admin
        .cancel_task(pb::CancelTaskRequest { task_id: completed })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
}

async fn requeue_gives_a_fresh_budget_and_keeps_history(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let id = submit_one(
        &mut c,
        pb::TaskSpec {
            retry: retry_now(2),
            ..spec("rq")
        },
    )
    .await;
    for _ in 0..2 {
        let t = lease_one(&mut c, "rq").await;
        c.fail(pb::FailRequest {
            task_id: id.clone(),
            lease_token: t.lease_token,
            error_message: "nope".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    assert_eq!(state(&get(&mut admin, &id).await), pb::TaskState::Dead);
    let not_dead = submit_one(&mut c, spec("rq-other")).await;
    let err = admin
        .requeue_task(pb::RequeueTaskRequest { task_id: not_dead })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);

    let task = admin
        .requeue_task(pb::RequeueTaskRequest {
            task_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .task
        .unwrap();
    assert_eq!(state(&task), pb::TaskState::Ready);
    assert_eq!(task.last_error, "nope", "history kept");
    // Two further attempts, numbered 3 and 4.
    for expected in [3, 4] {
        let t = lease_one(&mut c, "rq").await;
        assert_eq!(t.attempt, expected);
        c.fail(pb::FailRequest {
            task_id: id.clone(),
            lease_token: t.lease_token,
            ..Default::default()
        })
        .await
        .unwrap();
    }
    assert_eq!(state(&get(&mut admin, &id).await), pb::TaskState::Dead);
    let attempts = admin
        .list_attempts(pb::ListAttemptsRequest { task_id: id })
        .await
        .unwrap()
        .into_inner()
        .attempts;
    assert_eq!(
        attempts.iter().map(|a| a.attempt).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
}

// 10. Attempt history: worker and peer address per lease.
async fn every_lease_records_an_attempt_with_worker_and_address(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let id = submit_one(
        &mut c,
        pb::TaskSpec {
            retry: retry_now(3),
            ..spec("hist")
        },
    )
    .await;
    let t = lease_one(&mut c, "hist").await;
    c.fail(pb::FailRequest {
        task_id: id.clone(),
        lease_token: t.lease_token,
        error_message: "first try failed".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut req = lease_req("hist", 1);
    req.worker_id = "w2".into();
    let t = c.lease(req).await.unwrap().into_inner().tasks.remove(0);
    c.complete(pb::CompleteRequest {
        task_id: id.clone(),
        lease_token: t.lease_token,
        result: b"ok".to_vec(),
        lease_next: None,
    })
    .await
    .unwrap();
    let attempts = admin
        .list_attempts(pb::ListAttemptsRequest {
            task_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .attempts;
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0].worker_id, "w1");
    assert_eq!(attempts[0].outcome, pb::AttemptOutcome::Failed as i32);
    assert_eq!(attempts[0].error, "first try failed");
    assert_eq!(attempts[1].worker_id, "w2");
    assert_eq!(attempts[1].outcome, pb::AttemptOutcome::Succeeded as i32);
    for a in &attempts {
        assert!(
            a.worker_address.starts_with("127.0.0.1:"),
            "{}",
            a.worker_address
        );
        assert!(a.finished_at.is_some());
    }
    let task = get(&mut admin, &id).await;
    assert_eq!(task.result, b"ok");
    assert_eq!(task.leased_by, "w2");
    let missing = admin
        .list_attempts(pb::ListAttemptsRequest {
            task_id: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
}

// 3b. Fencing: holder A's calls after the task was leased again to B are refused,
// alone and combined with B's, and A's lease that expired unreclaimed is lost too.
async fn a_previous_holder_is_fenced_off_after_the_task_moves_on(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let id = submit_one(
        &mut c,
        pb::TaskSpec {
            retry: retry_now(5),
            ..spec("fence")
        },
    )
    .await;
    let a = lease_one(&mut c, "fence").await;
    // A's lease expires; before the reaper runs, A can no longer settle.
    app.advance(Duration::from_secs(31));
    let late = c
        .complete(pb::CompleteRequest {
            task_id: id.clone(),
            lease_token: a.lease_token.clone(),
            result: b"late".to_vec(),
            lease_next: None,
        })
        .await
        .unwrap_err();
    assert_eq!(error_reason(&late).as_deref(), Some("LEASE_LOST"));
    assert_eq!(state(&get(&mut admin, &id).await), pb::TaskState::Leased);
    app.reap().await;
    let b2 = lease_one(&mut c, "fence").await;
    assert_eq!(b2.task_id, id);
    assert!(b2.fencing_token > a.fencing_token);
    let before = get(&mut admin, &id).await;

    let lost = |r: Result<tonic::Response<_>, tonic::Status>| {
        let s = r.map(|_: tonic::Response<()>| ()).unwrap_err();
        assert_eq!(s.code(), Code::Aborted, "{s:?}");
        assert_eq!(error_reason(&s).as_deref(), Some("LEASE_LOST"));
    };
    lost(
        c.complete(pb::CompleteRequest {
            task_id: id.clone(),
            lease_token: a.lease_token.clone(),
            result: b"a".to_vec(),
            lease_next: None,
        })
        .await
        .map(|r| r.map(|_| ())),
    );
    lost(
        c.fail(pb::FailRequest {
            task_id: id.clone(),
            lease_token: a.lease_token.clone(),
            error_message: "a".into(),
            ..Default::default()
        })
        .await
        .map(|r| r.map(|_| ())),
    );
    lost(
        c.checkpoint(pb::CheckpointRequest {
            task_id: id.clone(),
            lease_token: a.lease_token.clone(),
            checkpoint: b"a".to_vec(),
            extend_by: None,
        })
        .await
        .map(|r| r.map(|_| ())),
    );
    let hb = c
        .heartbeat(pb::HeartbeatRequest {
            worker_id: "w1".into(),
            leases: vec![pb::LeaseRef {
                task_id: id.clone(),
                lease_token: a.lease_token.clone(),
            }],
            extend_by: None,
        })
        .await
        .unwrap()
        .into_inner()
        .leases;
    assert!(hb[0].lost);
    assert_eq!(get(&mut admin, &id).await, before, "A changed nothing");

    // A and B complete at the same moment (the broker combines the calls):
    // B's settles, A's is refused.
    let (mut ca, mut cb) = (app.broker().await, app.broker().await);
    let complete =
        |c: &mut taskbroker_client::pb::broker_service_client::BrokerServiceClient<_>,
         token: String| {
            let mut c = c.clone();
            let id = id.clone();
            async move {
                c.complete(pb::CompleteRequest {
                    task_id: id,
                    lease_token: token,
                    result: b"done".to_vec(),
                    lease_next: None,
                })
                .await
            }
        };
    let (ra, rb) = tokio::join!(
        complete(&mut ca, a.lease_token.clone()),
        complete(&mut cb, b2.lease_token.clone())
    );
    let ra = ra.unwrap_err();
    assert_eq!(error_reason(&ra).as_deref(), Some("LEASE_LOST"));
    rb.expect("B settles");
    let done = get(&mut admin, &id).await;
    assert_eq!(state(&done), pb::TaskState::Succeeded);
    assert_eq!(done.result, b"done");
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

// 2b. A Lease reply stops at the reply budget (4 MiB by default, the clients'
// receive limit), so every task it hands out can be decoded; the rest wait.
async fn a_lease_reply_never_outgrows_what_a_client_can_decode(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    for _ in 0..6 {
        submit_one(
            &mut c,
            pb::TaskSpec {
                payload: vec![1; 1 << 20],
                ..spec("heavy")
            },
        )
        .await;
    }
    // A default client: 4 MiB receive limit.
    let first = c.lease(lease_req("heavy", 10)).await.expect("decodable");
    let first = first.into_inner().tasks;
    assert_eq!(
        first.len(),
        3,
        "3 MiB and their overhead fit, a fourth would not"
    );
    let second = c
        .lease(lease_req("heavy", 10))
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert_eq!(second.len(), 3);
}

all_backends!(
    a_lease_reply_never_outgrows_what_a_client_can_decode,
    a_previous_holder_is_fenced_off_after_the_task_moves_on,
    per_queue_lease_bounds_hold_in_every_lease_call,
    lease_order_is_priority_then_deadline_then_run_at_then_submission,
    a_lease_over_several_queues_takes_the_best_of_all,
    stale_token_is_aborted_with_lease_lost_and_changes_nothing,
    repeated_complete_or_fail_with_settling_token_is_ok,
    complete_many_reports_each_task_and_validates_all_or_nothing,
    expired_leases_are_reclaimed_and_end_dead_after_max_attempts,
    failures_follow_the_retry_policy,
    checkpoint_is_handed_to_the_next_attempt,
    deadlines_cap_leases_and_kill_late_tasks,
    same_key_in_same_queue_is_deduplicated,
    cancel_stops_waiting_tasks_and_asks_running_ones,
    requeue_gives_a_fresh_budget_and_keeps_history,
    every_lease_records_an_attempt_with_worker_and_address,
);
