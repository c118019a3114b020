//! Idempotent submit, cancel, requeue and the attempt history.

use super::*;

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

all_backends!(
    same_key_in_same_queue_is_deduplicated,
    cancel_stops_waiting_tasks_and_asks_running_ones,
    requeue_gives_a_fresh_budget_and_keeps_history,
    every_lease_records_an_attempt_with_worker_and_address
);
