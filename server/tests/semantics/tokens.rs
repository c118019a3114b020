//! Lease tokens: stale tokens, repeated settles, CompleteMany and fencing off a previous holder.

use super::*;

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

all_backends!(
    a_previous_holder_is_fenced_off_after_the_task_moves_on,
    stale_token_is_aborted_with_lease_lost_and_changes_nothing,
    repeated_complete_or_fail_with_settling_token_is_ok,
    complete_many_reports_each_task_and_validates_all_or_nothing
);
