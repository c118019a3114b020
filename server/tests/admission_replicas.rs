//! Admission: two broker replicas on one Postgres (or MySQL) share their queues'
//! limits (a limit of 1 is 1 in the cluster) and their settings.

mod common;
#[path = "admission/helpers.rs"]
mod helpers;

use std::collections::HashSet;
use std::sync::Arc;

use common::*;
use helpers::*;
use taskbroker_client::pb;

async fn two_replicas(backend: Backend) -> Option<(TestApp, TestApp)> {
    let db = Arc::new(test_db(backend).await?);
    let a = spawn_on(db.clone(), Options::default()).await;
    let b = spawn_on(db, Options::default()).await;
    Some((a, b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_limit_of_one_is_one_across_replicas() {
    limit_of_one_across_replicas(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_limit_of_one_is_one_across_mysql_replicas() {
    limit_of_one_across_replicas(Backend::Mysql).await;
}

async fn limit_of_one_across_replicas(backend: Backend) {
    let Some((a, b)) = two_replicas(backend).await else {
        return;
    };
    let (mut admin, mut ca, mut cb) = (a.admin().await, a.broker().await, b.broker().await);
    set_queue(
        &mut admin,
        "q",
        pb::QueueConfig {
            max_concurrent: 1,
            ..Default::default()
        },
        &["max_concurrent"],
    )
    .await;
    // The other replica reads the settings (it does within 500 ms by itself).
    b.service().queues_reload().await.unwrap();
    submit(&mut ca, vec![spec("q"), spec("q"), spec("q")]).await;
    let held = lease(&mut ca, "q", 5).await;
    assert_eq!(held.len(), 1);
    assert!(lease(&mut cb, "q", 5).await.is_empty());
    complete(&mut ca, &held[0]).await;
    assert_eq!(lease(&mut cb, "q", 5).await.len(), 1);
    assert!(lease(&mut ca, "q", 5).await.is_empty());
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_limit_holds_with_workers_on_both_replicas() {
    per_key_limit_on_both_replicas(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_limit_holds_with_workers_on_both_mysql_replicas() {
    per_key_limit_on_both_replicas(Backend::Mysql).await;
}

async fn per_key_limit_on_both_replicas(backend: Backend) {
    let Some(db) = test_db(backend).await else {
        return;
    };
    let db = Arc::new(db);
    let real = || Options {
        manual_clock: false,
        ..Options::default()
    };
    let a = spawn_on(db.clone(), real()).await;
    let b = spawn_on(db, real()).await;
    let (mut admin, mut ca) = (a.admin().await, a.broker().await);
    set_queue(
        &mut admin,
        "q",
        pb::QueueConfig {
            max_concurrent_per_key: 1,
            ..Default::default()
        },
        &["max_concurrent_per_key"],
    )
    .await;
    b.service().queues_reload().await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let tasks = (0..100).map(|k| keyed("q", &format!("user-{k}"))).collect();
        ids.extend(submit(&mut ca, tasks).await);
    }
    let report = run_workers(&[&a, &b], "q", 8, 4, ids.len()).await;
    assert_eq!(report.max_in_flight_per_key, 1, "a key ran twice at once");
    assert_eq!(report.completed, ids.into_iter().collect::<HashSet<_>>());
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_on_one_replica_stops_the_other_and_resume_wakes_its_long_poll() {
    pause_and_resume_across_replicas(Backend::Postgres).await;
}

/// On MySQL the resume reaches the other replica through the event counter
/// its poller reads (a settings change advances it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_on_one_mysql_replica_stops_the_other_and_resume_wakes_its_long_poll() {
    pause_and_resume_across_replicas(Backend::Mysql).await;
}

async fn pause_and_resume_across_replicas(backend: Backend) {
    let Some((a, b)) = two_replicas(backend).await else {
        return;
    };
    let (mut admin, mut ca, mut cb) = (a.admin().await, a.broker().await, b.broker().await);
    submit(&mut ca, vec![spec("q")]).await;
    pause(&mut admin, "q", true).await;
    b.service().queues_reload().await.unwrap();
    assert!(lease(&mut cb, "q", 1).await.is_empty());
    let poll = tokio::spawn(async move {
        cb.lease(pb::LeaseRequest {
            wait: secs(20),
            ..lease_req("q", 1)
        })
        .await
        .unwrap()
        .into_inner()
        .tasks
    });
    b.until_waiting(1).await;
    pause(&mut admin, "q", false).await;
    assert_eq!(poll.await.unwrap().len(), 1);
    a.shutdown().await;
    b.shutdown().await;
}
