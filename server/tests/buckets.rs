//! Limit buckets and cooldowns on every store: a bucket shared by several
//! queues grants its burst and then its rate to all of them together, and its
//! concurrency limit counts their leases together; a cooldown of a key holds
//! every task of the key until its end and not after; ExplainTask names them.
//! Time is the manual clock's.

mod common;
#[path = "buckets/helpers.rs"]
mod helpers;

use std::time::Duration;

use common::*;
use helpers::*;
use taskbroker_client::pb;

async fn a_shared_bucket_grants_its_burst_then_its_rate_to_all_its_queues(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    set_bucket(&mut admin, "partner", 20.0, 20, 0).await;
    queue_bucket(&mut admin, "qa", "partner").await;
    queue_bucket(&mut admin, "qb", "partner").await;
    submit(&mut c, (0..30).map(|_| spec("qa")).collect()).await;
    submit(&mut c, (0..30).map(|_| spec("qb")).collect()).await;
    // The burst: 20 leases in all, not 20 per queue.
    let a = lease(&mut c, "qa", 15).await.len();
    let b = lease(&mut c, "qb", 15).await.len();
    assert_eq!((a, b), (15, 5));
    assert!(lease(&mut c, "qa", 10).await.is_empty());
    // Half a second: 10 tokens, for either queue.
    app.advance(Duration::from_millis(500));
    let b = lease(&mut c, "qb", 30).await.len();
    let a = lease(&mut c, "qa", 30).await.len();
    assert_eq!((a, b), (0, 10));
    let bucket = admin
        .get_bucket(pb::GetBucketRequest {
            name: "partner".into(),
        })
        .await
        .expect("get bucket")
        .into_inner()
        .bucket
        .expect("bucket");
    let u = bucket.r#use.expect("use");
    assert!(u.tokens < 1.0, "{}", u.tokens);
    assert_eq!(u.leases_held, 30);
    app.shutdown().await;
}

async fn a_bucket_concurrency_limit_counts_the_leases_of_every_queue(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    set_bucket(&mut admin, "db", 0.0, 0, 3).await;
    // Tasks name the bucket themselves, in queues with no settings at all.
    submit(&mut c, (0..4).map(|_| in_bucket("qa", "db")).collect()).await;
    let other = submit(&mut c, (0..4).map(|_| in_bucket("qb", "db")).collect()).await;
    let held = lease(&mut c, "qa", 10).await;
    assert_eq!(held.len(), 3);
    assert!(lease(&mut c, "qb", 10).await.is_empty());
    let gates = explain(&mut admin, &other[0]).await;
    let full = gates
        .iter()
        .find(|g| kind(g) == pb::GateKind::BucketConcurrencyFull)
        .expect("bucket full gate");
    assert_eq!(full.bucket, "db");
    complete(&mut c, &held[0]).await;
    assert_eq!(lease(&mut c, "qb", 10).await.len(), 1);
    // A task of the bucket's queues that names no bucket is not held by it.
    submit(&mut c, vec![spec("qb")]).await;
    assert_eq!(lease(&mut c, "qb", 10).await.len(), 1);
    app.shutdown().await;
}

async fn a_key_cooldown_holds_every_task_of_the_key_until_its_end(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    let ids = submit(
        &mut c,
        vec![keyed("q", "acme"), keyed("q", "acme"), keyed("q", "acme")],
    )
    .await;
    let first = lease_one(&mut c, "q").await;
    assert_eq!(first.task_id, ids[0]);
    let out = fail_with(
        &mut c,
        &first,
        cooldown(pb::CooldownScope::ConcurrencyKey, Duration::from_secs(10)),
    )
    .await
    .expect("fail with cooldown");
    // The failed task's own retry waits at least as long.
    let next = out.next_run_at.expect("retried");
    let listed = cooldowns(&mut admin).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].queue.as_str(), listed[0].concurrency_key.as_str()),
        ("q", "acme")
    );
    assert_eq!(listed[0].task_id, ids[0]);
    let until = listed[0].until.expect("until");
    assert!(next.seconds >= until.seconds, "{next:?} < {until:?}");
    // Other keys of the queue lease on.
    submit(&mut c, vec![keyed("q", "other")]).await;
    let leased = lease(&mut c, "q", 10).await;
    assert_eq!(leased.len(), 1);
    assert_eq!(leased[0].concurrency_key, "other");
    let gates = explain(&mut admin, &ids[1]).await;
    let g = gates
        .iter()
        .find(|g| kind(g) == pb::GateKind::Cooldown)
        .expect("cooldown gate");
    assert_eq!(g.concurrency_key, "acme");
    assert_eq!(g.until, Some(until));
    // Until its end, nothing of the key; at its end, every task of it.
    app.advance(Duration::from_millis(9_999));
    assert!(lease(&mut c, "q", 10).await.is_empty());
    app.advance(Duration::from_millis(1));
    assert_eq!(lease(&mut c, "q", 10).await.len(), 3);
    assert!(cooldowns(&mut admin).await.is_empty());
    app.shutdown().await;
}

async fn an_operator_lifts_a_cooldown(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    set_bucket(&mut admin, "partner", 0.0, 0, 100).await;
    submit(&mut c, (0..3).map(|_| in_bucket("q", "partner")).collect()).await;
    let t = lease_one(&mut c, "q").await;
    fail_with(
        &mut c,
        &t,
        cooldown(pb::CooldownScope::Bucket, Duration::from_secs(600)),
    )
    .await
    .expect("fail with cooldown");
    assert!(lease(&mut c, "q", 10).await.is_empty());
    let b = admin
        .get_bucket(pb::GetBucketRequest {
            name: "partner".into(),
        })
        .await
        .expect("get bucket")
        .into_inner()
        .bucket
        .expect("bucket");
    assert!(b.cooldown_until.is_some());
    let lifted = admin
        .lift_cooldown(pb::LiftCooldownRequest {
            bucket: "partner".into(),
            ..Default::default()
        })
        .await
        .expect("lift")
        .into_inner()
        .lifted;
    assert!(lifted);
    assert_eq!(lease(&mut c, "q", 10).await.len(), 2);
    let again = admin
        .lift_cooldown(pb::LiftCooldownRequest {
            bucket: "partner".into(),
            ..Default::default()
        })
        .await
        .expect("lift")
        .into_inner()
        .lifted;
    assert!(!again);
    app.shutdown().await;
}

async fn a_task_bucket_wins_over_its_queue_bucket(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    set_bucket(&mut admin, "narrow", 0.0, 0, 1).await;
    set_bucket(&mut admin, "wide", 0.0, 0, 10).await;
    queue_bucket(&mut admin, "q", "narrow").await;
    let own = submit(&mut c, (0..3).map(|_| in_bucket("q", "wide")).collect()).await;
    let queued = submit(&mut c, (0..3).map(|_| spec("q")).collect()).await;
    assert_eq!(get(&mut admin, &own[0]).await.bucket, "wide");
    assert_eq!(get(&mut admin, &queued[0]).await.bucket, "narrow");
    // Three of "wide", and one of "narrow".
    let leased = lease(&mut c, "q", 10).await;
    assert_eq!(leased.len(), 4);
    let narrow = leased
        .iter()
        .filter(|t| queued.contains(&t.task_id))
        .count();
    assert_eq!(narrow, 1);
    app.shutdown().await;
}

all_backends!(
    a_task_bucket_wins_over_its_queue_bucket,
    a_shared_bucket_grants_its_burst_then_its_rate_to_all_its_queues,
    a_bucket_concurrency_limit_counts_the_leases_of_every_queue,
    a_key_cooldown_holds_every_task_of_the_key_until_its_end,
    an_operator_lifts_a_cooldown,
);
