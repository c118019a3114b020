//! lease_next end to end: Complete, CompleteMany and Fail settle first,
//! exactly as alone, then lease as Lease would and answer the tasks in the same
//! call. A bad lease_next changes nothing; a settle that fails leases nothing.
//! Bounds below are liveness guards, not speed checks.

mod common;

#[path = "admission/helpers.rs"]
mod helpers;

use std::time::Duration;

use common::*;
use helpers::{pause, set_queue};
use taskbroker_client::pb;

const GUARD: Duration = Duration::from_secs(20);

fn next(queue: &str, max_tasks: u32) -> Option<pb::LeaseRequest> {
    Some(pb::LeaseRequest {
        worker_id: "w1".into(),
        ..lease_req(queue, max_tasks)
    })
}

fn completing(t: &pb::LeasedTask, lease_next: Option<pb::LeaseRequest>) -> pb::CompleteRequest {
    pb::CompleteRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
        result: Vec::new(),
        lease_next,
    }
}

fn ids(tasks: &[pb::LeasedTask]) -> Vec<String> {
    tasks.iter().map(|t| t.task_id.clone()).collect()
}

async fn complete_returns_the_next_tasks_in_lease_order(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    let first = submit_one(&mut c, spec("q")).await;
    let low = submit_one(&mut c, spec("q")).await;
    let high = submit_one(
        &mut c,
        pb::TaskSpec {
            priority: 5,
            ..spec("q")
        },
    )
    .await;
    let other = submit_one(&mut c, spec("elsewhere")).await;
    let mut held = lease(&mut c, "q", 1).await;
    assert_eq!(ids(&held), vec![high.clone()]);
    let held = held.remove(0);
    let got = c
        .complete(completing(&held, next("q", 5)))
        .await
        .expect("complete")
        .into_inner()
        .next_tasks;
    // As a Lease would have answered: priority, then age; only the named queues.
    assert_eq!(ids(&got), vec![first.clone(), low.clone()]);
    for t in &got {
        assert_eq!(t.attempt, 1);
        assert!(!t.lease_token.is_empty());
        assert_eq!(
            state(&get(&mut admin, &t.task_id).await),
            pb::TaskState::Leased
        );
    }
    assert_eq!(
        state(&get(&mut admin, &high).await),
        pb::TaskState::Succeeded
    );
    assert_eq!(state(&get(&mut admin, &other).await), pb::TaskState::Ready);
    // The leases handed back settle like any other.
    let got2 = c
        .complete(completing(&got[0], next("q", 1)))
        .await
        .expect("complete")
        .into_inner()
        .next_tasks;
    assert!(got2.is_empty(), "the one left is leased already");
    c.complete(completing(&got[1], None))
        .await
        .expect("complete");
    assert_eq!(
        state(&get(&mut admin, &low).await),
        pb::TaskState::Succeeded
    );
    // A settle without lease_next answers no tasks and leases nothing.
    let mut d = lease(&mut c, "elsewhere", 1).await;
    submit_one(&mut c, spec("elsewhere")).await;
    let none = c
        .complete(completing(&d.remove(0), None))
        .await
        .expect("complete")
        .into_inner()
        .next_tasks;
    assert!(none.is_empty());
    assert_eq!(lease(&mut c, "elsewhere", 5).await.len(), 1);
    app.shutdown().await;
}

async fn fail_returns_the_next_task_but_not_its_own_retry_before_the_backoff(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    let failing = submit_one(&mut c, spec("q")).await;
    let held = lease_one(&mut c, "q").await;
    assert_eq!(held.task_id, failing);
    let after = submit_one(&mut c, spec("q")).await;
    let out = c
        .fail(pb::FailRequest {
            task_id: held.task_id.clone(),
            lease_token: held.lease_token.clone(),
            error_message: "boom".into(),
            retry_after: secs(60),
            lease_next: next("q", 5),
            ..Default::default()
        })
        .await
        .expect("fail")
        .into_inner();
    assert_eq!(out.state(), pb::TaskState::Scheduled);
    assert!(out.next_run_at.is_some());
    assert_eq!(ids(&out.next_tasks), vec![after.clone()]);
    assert_eq!(
        state(&get(&mut admin, &failing).await),
        pb::TaskState::Scheduled
    );
    // Once its backoff has passed, the retry leases (the next attempt).
    app.advance(Duration::from_secs(61));
    let retry = lease_one(&mut c, "q").await;
    assert_eq!(retry.task_id, failing);
    assert_eq!(retry.attempt, 2);
    app.shutdown().await;
}

async fn complete_many_returns_the_next_batch(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    let all = submit(&mut c, (0..5).map(|_| spec("q")).collect()).await;
    let held = lease(&mut c, "q", 2).await;
    assert_eq!(ids(&held), all[..2].to_vec());
    let out = c
        .complete_many(pb::CompleteManyRequest {
            completions: held.iter().map(|t| completing(t, None)).collect(),
            lease_next: next("q", 2),
        })
        .await
        .expect("complete many")
        .into_inner();
    assert!(
        out.results
            .iter()
            .all(|r| r.outcome() == pb::CompleteOutcome::Completed)
    );
    assert_eq!(ids(&out.next_tasks), all[2..4].to_vec());
    for id in &all[..2] {
        assert_eq!(state(&get(&mut admin, id).await), pb::TaskState::Succeeded);
    }
    for id in &all[2..4] {
        assert_eq!(state(&get(&mut admin, id).await), pb::TaskState::Leased);
    }
    // A lost lease in the batch is an outcome, not an error: the rest settle and
    // the next tasks are leased.
    let mut stale = out.next_tasks[1].clone();
    stale.lease_token = "not-the-token".into();
    let out = c
        .complete_many(pb::CompleteManyRequest {
            completions: vec![
                completing(&out.next_tasks[0], None),
                completing(&stale, None),
            ],
            lease_next: next("q", 5),
        })
        .await
        .expect("complete many")
        .into_inner();
    let outcomes: Vec<_> = out.results.iter().map(|r| r.outcome()).collect();
    assert_eq!(
        outcomes,
        vec![
            pb::CompleteOutcome::Completed,
            pb::CompleteOutcome::LeaseLost
        ]
    );
    assert_eq!(ids(&out.next_tasks), all[4..].to_vec());
    app.shutdown().await;
}

async fn a_paused_queue_settles_but_leases_nothing(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    let all = submit(&mut c, vec![spec("q"), spec("q")]).await;
    let held = lease_one(&mut c, "q").await;
    pause(&mut admin, "q", true).await;
    let got = c
        .complete(completing(&held, next("q", 1)))
        .await
        .expect("complete")
        .into_inner()
        .next_tasks;
    assert!(got.is_empty(), "paused: {got:?}");
    assert_eq!(
        state(&get(&mut admin, &all[0]).await),
        pb::TaskState::Succeeded
    );
    assert_eq!(state(&get(&mut admin, &all[1]).await), pb::TaskState::Ready);
    app.shutdown().await;
}

async fn a_full_admission_limit_leases_nothing(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    let config = pb::QueueConfig {
        max_concurrent: 1,
        ..Default::default()
    };
    set_queue(&mut admin, "limited", config, &["max_concurrent"]).await;
    let limited = submit(&mut c, vec![spec("limited"), spec("limited")]).await;
    let holder = lease_one(&mut c, "limited").await;
    submit_one(&mut c, spec("q")).await;
    let held = lease_one(&mut c, "q").await;
    let got = c
        .complete(completing(&held, next("limited", 1)))
        .await
        .expect("complete")
        .into_inner()
        .next_tasks;
    assert!(got.is_empty(), "limit full: {got:?}");
    assert_eq!(
        state(&get(&mut admin, &held.task_id).await),
        pb::TaskState::Succeeded
    );
    assert_eq!(
        state(&get(&mut admin, &limited[1]).await),
        pb::TaskState::Ready
    );
    // Completing the holder frees the slot, and its own lease_next takes it.
    let got = c
        .complete(completing(&holder, next("limited", 1)))
        .await
        .expect("complete")
        .into_inner()
        .next_tasks;
    assert_eq!(ids(&got), vec![limited[1].clone()]);
    app.shutdown().await;
}

async fn a_bad_lease_next_changes_nothing(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    submit(&mut c, vec![spec("q"), spec("q")]).await;
    let held = lease_one(&mut c, "q").await;
    let bad_queue = Some(pb::LeaseRequest {
        queues: vec!["bad name!".into()],
        ..next("q", 1).unwrap()
    });
    let err = c
        .complete(completing(&held, bad_queue.clone()))
        .await
        .expect_err("bad queue");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(bad_field(&err).as_deref(), Some("lease_next.queues[0]"));
    let zero = Some(pb::LeaseRequest {
        max_tasks: 0,
        ..next("q", 1).unwrap()
    });
    let err = c
        .fail(pb::FailRequest {
            task_id: held.task_id.clone(),
            lease_token: held.lease_token.clone(),
            lease_next: zero,
            ..Default::default()
        })
        .await
        .expect_err("bad max_tasks");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(bad_field(&err).as_deref(), Some("lease_next.max_tasks"));
    let negative_wait = Some(pb::LeaseRequest {
        wait: Some(prost_types::Duration {
            seconds: -1,
            nanos: 0,
        }),
        ..next("q", 1).unwrap()
    });
    let err = c
        .complete_many(pb::CompleteManyRequest {
            completions: vec![completing(&held, None)],
            lease_next: negative_wait,
        })
        .await
        .expect_err("bad wait");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(bad_field(&err).as_deref(), Some("lease_next.wait"));
    let err = c
        .complete_many(pb::CompleteManyRequest {
            completions: vec![completing(&held, next("q", 1))],
            lease_next: None,
        })
        .await
        .expect_err("lease_next inside a completion");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        bad_field(&err).as_deref(),
        Some("completions[0].lease_next")
    );
    // Nothing changed: the task is leased still, under the same token, and the
    // other task was not leased.
    let t = get(&mut admin, &held.task_id).await;
    assert_eq!(state(&t), pb::TaskState::Leased);
    assert_eq!(t.attempt, 1);
    let rest = lease(&mut c, "q", 5).await;
    assert_eq!(rest.len(), 1, "the other task is still ready");
    c.complete(completing(&held, None))
        .await
        .expect("the same token completes");
    app.shutdown().await;
}

async fn a_lost_lease_leases_nothing(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    let now = pb::TaskSpec {
        retry: retry_now(3),
        ..spec("q")
    };
    let id = submit_one(&mut c, now).await;
    let held = lease_one(&mut c, "q").await;
    app.advance(Duration::from_secs(31));
    assert_eq!(app.reap().await.reclaimed, 1);
    assert_eq!(state(&get(&mut admin, &id).await), pb::TaskState::Ready);
    let err = c
        .complete(completing(&held, next("q", 1)))
        .await
        .expect_err("lease lost");
    assert_eq!(err.code(), tonic::Code::Aborted);
    assert_eq!(error_reason(&err).as_deref(), Some("LEASE_LOST"));
    let err = c
        .fail(pb::FailRequest {
            task_id: held.task_id.clone(),
            lease_token: held.lease_token.clone(),
            lease_next: next("q", 1),
            ..Default::default()
        })
        .await
        .expect_err("lease lost");
    assert_eq!(err.code(), tonic::Code::Aborted);
    // The READY task stayed READY: nothing was leased by either call.
    assert_eq!(state(&get(&mut admin, &id).await), pb::TaskState::Ready);
    let again = lease_one(&mut c, "q").await;
    assert_eq!(again.task_id, id);
    assert_eq!(again.attempt, 2);
    app.shutdown().await;
}

async fn a_waiting_lease_next_gets_a_task_submitted_meanwhile(b: Backend) {
    // Sync match on, on Postgres too (off there by default).
    let opts = Options {
        settings: taskbroker_server::service::Settings {
            sync_match_postgres: true,
            ..Default::default()
        },
        ..Options::default()
    };
    let Some(app) = spawn_app_with(b, opts).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    let done = submit_one(&mut c, spec("q")).await;
    let held = lease_one(&mut c, "q").await;
    let mut worker = app.broker().await;
    let call = tokio::spawn(async move {
        let waiting = Some(pb::LeaseRequest {
            wait: secs(60),
            ..next("q", 1).unwrap()
        });
        worker
            .complete(completing(&held, waiting))
            .await
            .expect("complete")
            .into_inner()
            .next_tasks
    });
    app.until_waiting(1).await;
    // The settle committed before the wait began.
    assert_eq!(
        state(&get(&mut admin, &done).await),
        pb::TaskState::Succeeded
    );
    let id = submit_one(&mut c, spec("q")).await;
    let got = tokio::time::timeout(GUARD, call).await.unwrap().unwrap();
    assert_eq!(ids(&got), vec![id.clone()]);
    assert_eq!(state(&get(&mut admin, &id).await), pb::TaskState::Leased);
    // Handed over by the Submit, as to a waiting Lease.
    assert_eq!(app.service().sync_matched(), 1);
    app.shutdown().await;
}

all_backends!(
    complete_returns_the_next_tasks_in_lease_order,
    fail_returns_the_next_task_but_not_its_own_retry_before_the_backoff,
    complete_many_returns_the_next_batch,
    a_paused_queue_settles_but_leases_nothing,
    a_full_admission_limit_leases_nothing,
    a_bad_lease_next_changes_nothing,
    a_lost_lease_leases_nothing,
    a_waiting_lease_next_gets_a_task_submitted_meanwhile,
);
