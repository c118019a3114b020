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
    // Submit only once the poll waits, so only a wake-up can answer it.
    app.until_waiting(1).await;
    let mut c = app.broker().await;
    let id = submit_one(&mut c, spec("lp")).await;
    let got = tokio::time::timeout(GUARD, poll)
        .await
        .expect("the submit woke the long-poll")
        .unwrap();
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
    req.set_timeout(Duration::from_secs(5));
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

async fn leases_over_ever_new_queue_names_leave_nothing_behind(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    for i in 0..300 {
        let mut req = lease_req(&format!("random-{i}"), 1);
        req.wait = dur(Duration::from_millis(1));
        assert!(c.lease(req).await.unwrap().into_inner().tasks.is_empty());
    }
    assert_eq!(app.service().dispatcher().queues_tracked(), 0);
}

all_backends!(
    leases_over_ever_new_queue_names_leave_nothing_behind,
    a_waiting_lease_wakes_when_a_task_is_submitted,
    an_empty_long_poll_answers_ok_when_the_wait_runs_out,
    a_waiting_lease_picks_up_a_task_when_its_run_at_arrives,
    the_background_reaper_reclaims_an_expired_lease,
);

/// A long-poll on one replica wakes when a task is submitted through another
/// (Postgres LISTEN/NOTIFY).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_on_one_replica_wakes_on_a_submit_to_another() {
    wakes_across_replicas(Backend::Postgres).await;
}

/// On MySQL (the event counter each replica polls). The time from the submit's
/// answer to the lease's is printed: the pick-up latency across replicas
/// (docs/deploy.md quotes it; nothing is asserted about it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_on_one_replica_wakes_on_a_submit_to_another_mysql() {
    wakes_across_replicas(Backend::Mysql).await;
}

async fn wakes_across_replicas(backend: Backend) {
    let Some(db) = test_db(backend).await else {
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
    a.until_waiting(1).await;
    let mut c = b.broker().await;
    let id = submit_one(&mut c, spec("xr")).await;
    let submitted = std::time::Instant::now();
    let got = tokio::time::timeout(GUARD, poll)
        .await
        .expect("woken")
        .unwrap();
    eprintln!(
        "{backend:?}: picked up on the other replica {:?} after the submit's answer",
        submitted.elapsed()
    );
    assert_eq!(got[0].task_id, id);
}

/// A long-poll that is woken and then cancelled (its caller went away) before it
/// took its task passes the wake-up on to the next waiter. On Postgres too: the
/// broker skips its own Submit's NOTIFY, so that does not wake B.
#[tokio::test(flavor = "current_thread")]
async fn a_woken_long_poll_that_goes_away_passes_the_wake_up_on() {
    woken_long_poll_goes_away(Backend::Sqlite).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_woken_long_poll_that_goes_away_passes_the_wake_up_on_postgres() {
    woken_long_poll_goes_away(Backend::Postgres).await;
}

/// On MySQL too.
#[tokio::test(flavor = "current_thread")]
async fn a_woken_long_poll_that_goes_away_passes_the_wake_up_on_mysql() {
    woken_long_poll_goes_away(Backend::Mysql).await;
}

async fn woken_long_poll_goes_away(backend: Backend) {
    use taskbroker_server::service::{LeaseRequest, SubmitTask};
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let broker = app.service();
    // Over two queues: a long-poll of one queue would be handed the task by the
    // Submit itself (sync match), with no wake-up to pass on.
    let req = |worker: &str| LeaseRequest {
        worker_id: worker.into(),
        queues: vec!["pass".into(), "pass-other".into()],
        max_tasks: 1,
        wait: Some(Duration::from_secs(60)),
        ..LeaseRequest::default()
    };
    // A waits first, so the submit's one wake-up goes to A.
    let mut a = Box::pin(broker.lease(req("a")));
    while broker.dispatcher().waiters() < 1 {
        assert!(futures::poll!(a.as_mut()).is_pending());
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let b = tokio::spawn({
        let broker = broker.clone();
        async move { broker.lease(req("b")).await }
    });
    app.until_waiting(2).await;
    broker
        .submit(vec![SubmitTask {
            queue: "pass".into(),
            ..SubmitTask::default()
        }])
        .await
        .unwrap();
    // A wakes and asks the store (this thread runs nothing else meanwhile), then
    // its caller goes away.
    assert!(futures::poll!(a.as_mut()).is_pending());
    assert_eq!(broker.dispatcher().waiters(), 1, "A was the one woken");
    drop(a);
    let got = tokio::time::timeout(GUARD, b)
        .await
        .expect("B was woken in A's place")
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 1);
}

/// The notification listener has a connection of its own: a pool of one still
/// serves every call, and a long-poll is still woken by another replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_one_connection_still_serves_calls_and_wake_ups() {
    let Some(db) = test_db(Backend::Postgres).await else {
        return;
    };
    let db = std::sync::Arc::new(db);
    let one = || Options {
        manual_clock: false,
        db_max_connections: Some(1),
        ..Options::default()
    };
    let a = spawn_on(db.clone(), one()).await;
    let b = spawn_on(db, one()).await;
    let mut waiter = a.broker().await;
    let poll = tokio::spawn(async move {
        let mut req = lease_req("one", 1);
        req.wait = secs(60);
        waiter.lease(req).await.unwrap().into_inner().tasks
    });
    a.until_waiting(1).await;
    let mut c = b.broker().await;
    let id = tokio::time::timeout(GUARD, submit_one(&mut c, spec("one")))
        .await
        .expect("a submit is served with a pool of one");
    let got = tokio::time::timeout(GUARD, poll)
        .await
        .expect("woken through the other replica's NOTIFY")
        .unwrap();
    assert_eq!(got[0].task_id, id);
    let mut w = a.broker().await;
    tokio::time::timeout(
        GUARD,
        w.complete(pb::CompleteRequest {
            task_id: id,
            lease_token: got[0].lease_token.clone(),
            result: vec![],
            lease_next: None,
        }),
    )
    .await
    .expect("a complete is served with a pool of one")
    .unwrap();
}
