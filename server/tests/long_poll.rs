//! Long-poll behaviour of Lease: woken by submits and due tasks, empty (OK) when
//! the wait or the call's own deadline runs out, and the real-time reaper.
//! Bounds below are liveness guards far above the expected latency, not speed checks.

mod common;

use std::time::Duration;

use common::*;
use taskbroker_client::pb;

const GUARD: Duration = Duration::from_secs(20);

async fn a_waiting_lease_wakes_when_a_task_is_submitted(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut waiter = app.broker().await;
    let poll = tokio::spawn(async move {
        let mut req = lease_req("lp", 5);
        req.wait = secs(60);
        waiter.lease(req).await.unwrap().into_inner().tasks
    });
    let mut c = app.broker().await;
    let id = submit_one(&mut c, spec("lp")).await;
    let got = tokio::time::timeout(GUARD, poll)
        .await
        .expect("the submit woke the long-poll")
        .unwrap();
    // The poll may have started before or after the submit; either way it gets the task.
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].task_id, id);
}

async fn an_empty_long_poll_answers_ok_when_the_wait_runs_out(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    let mut req = lease_req("empty", 5);
    req.wait = dur(Duration::from_millis(300));
    let r = c.lease(req).await.expect("OK, not an error");
    assert!(r.into_inner().tasks.is_empty());

    // The call's own deadline caps the wait: OK and empty, not DEADLINE_EXCEEDED.
    let mut req = tonic::Request::new(pb::LeaseRequest {
        wait: secs(60),
        ..lease_req("empty", 1)
    });
    req.set_timeout(Duration::from_millis(800));
    let r = c.lease(req).await.expect("answered before the deadline");
    assert!(r.into_inner().tasks.is_empty());
}

async fn a_waiting_lease_picks_up_a_task_when_its_run_at_arrives(b: Backend) {
    let Some(app) = spawn_app_with(
        b,
        Options {
            manual_clock: false,
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let mut c = app.broker().await;
    let run_at = chrono::Utc::now() + chrono::Duration::milliseconds(700);
    let id = submit_one(
        &mut c,
        pb::TaskSpec {
            run_at: ts(run_at),
            ..spec("due")
        },
    )
    .await;
    let mut req = lease_req("due", 1);
    req.wait = secs(60);
    let got = tokio::time::timeout(GUARD, c.lease(req))
        .await
        .expect("woken at run_at")
        .unwrap()
        .into_inner()
        .tasks;
    assert_eq!(got[0].task_id, id);
    assert!(chrono::Utc::now() >= run_at, "never leased before run_at");
}

async fn the_background_reaper_reclaims_an_expired_lease(b: Backend) {
    let Some(app) = spawn_app_with(
        b,
        Options {
            manual_clock: false,
            reclaim_interval: Duration::from_millis(200),
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let mut c = app.broker().await;
    let id = submit_one(
        &mut c,
        pb::TaskSpec {
            retry: retry_now(3),
            ..spec("expire")
        },
    )
    .await;
    let mut req = lease_req("expire", 1);
    req.lease_duration = secs(1);
    let first = c
        .lease(req.clone())
        .await
        .unwrap()
        .into_inner()
        .tasks
        .remove(0);
    // Nobody heartbeats; the reaper reclaims the lease and wakes this long-poll.
    req.wait = secs(30);
    let second = tokio::time::timeout(GUARD, c.lease(req))
        .await
        .expect("reclaimed")
        .unwrap()
        .into_inner()
        .tasks
        .remove(0);
    assert_eq!(second.task_id, id);
    assert_eq!(second.attempt, 2);
    assert!(second.fencing_token > first.fencing_token);
    assert_ne!(second.lease_token, first.lease_token);
}

both_backends!(
    a_waiting_lease_wakes_when_a_task_is_submitted,
    an_empty_long_poll_answers_ok_when_the_wait_runs_out,
    a_waiting_lease_picks_up_a_task_when_its_run_at_arrives,
    the_background_reaper_reclaims_an_expired_lease,
);

/// A long-poll on one replica wakes when a task is submitted through another
/// (Postgres LISTEN/NOTIFY).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_on_one_replica_wakes_on_a_submit_to_another() {
    let Some(db) = test_db(Backend::Postgres).await else {
        return;
    };
    let db = std::sync::Arc::new(db);
    // Real clocks: two manual clocks would disagree about when the task is due.
    let real = || Options {
        manual_clock: false,
        ..Options::default()
    };
    let a = spawn_on(db.clone(), real()).await;
    let b = spawn_on(db, real()).await;
    let mut waiter = a.broker().await;
    let poll = tokio::spawn(async move {
        let mut req = lease_req("xr", 1);
        req.wait = secs(60);
        waiter.lease(req).await.unwrap().into_inner().tasks
    });
    let mut c = b.broker().await;
    let id = submit_one(&mut c, spec("xr")).await;
    let got = tokio::time::timeout(GUARD, poll)
        .await
        .expect("woken")
        .unwrap();
    assert_eq!(got[0].task_id, id);
}
