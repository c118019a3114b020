//! Limit buckets and cooldowns with two broker replicas on one database: the
//! grants of a bucket's tasks on both replicas together stay within its burst
//! plus its rate times the time gone by (not twice that), and a cooldown one
//! replica's worker sets holds the key on the other replica until its end.

mod common;
#[path = "buckets/helpers.rs"]
mod helpers;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use helpers::*;
use taskbroker_client::pb;

async fn two_replicas(backend: Backend) -> Option<(TestApp, TestApp)> {
    let db = Arc::new(test_db(backend).await?);
    let a = spawn_on(db.clone(), Options::default()).await;
    let b = spawn_on(db, Options::default()).await;
    // One time on both: the later replica's manual clock started later.
    let lag = b.clock.now_utc() - a.clock.now_utc();
    a.advance(lag.to_std().expect("b started after a"));
    Some((a, b))
}

/// Both replicas' manual clocks, moved together.
fn advance(a: &TestApp, b: &TestApp, by: Duration) {
    a.advance(by);
    b.advance(by);
}

async fn a_bucket_is_shared_across_replicas(backend: Backend) {
    let Some((a, b)) = two_replicas(backend).await else {
        return;
    };
    let (mut admin, mut ca, mut cb) = (a.admin().await, a.broker().await, b.broker().await);
    set_bucket(&mut admin, "partner", 20.0, 20, 0).await;
    queue_bucket(&mut admin, "qa", "partner").await;
    queue_bucket(&mut admin, "qb", "partner").await;
    // The other replica reads the settings (it does within 500 ms by itself).
    b.service().queues_reload().await.unwrap();
    submit(&mut ca, (0..200).map(|_| spec("qa")).collect()).await;
    submit(&mut cb, (0..200).map(|_| spec("qb")).collect()).await;
    let mut granted = 0usize;
    let steps = 8;
    for step in 0..steps {
        // Each replica leases its own queue, in turn first.
        let (first, second) = if step % 2 == 0 {
            (&mut ca, &mut cb)
        } else {
            (&mut cb, &mut ca)
        };
        let queue = |first: bool| if (step % 2 == 0) == first { "qa" } else { "qb" };
        granted += lease(first, queue(true), 50).await.len();
        granted += lease(second, queue(false), 50).await.len();
        advance(&a, &b, Duration::from_millis(250));
    }
    // 20 of burst, then 5 per 250 ms step after the first: 20 + 7 * 5.
    let elapsed_s = 0.25 * f64::from(steps - 1);
    let bound = 20 + (20.0 * elapsed_s) as usize;
    assert_eq!(granted, bound, "granted {granted}, bound {bound}");
    a.shutdown().await;
    b.shutdown().await;
}

async fn a_cooldown_holds_its_key_on_every_replica(backend: Backend) {
    let Some((a, b)) = two_replicas(backend).await else {
        return;
    };
    let (mut admin, mut ca, mut cb) = (a.admin().await, a.broker().await, b.broker().await);
    submit(&mut ca, (0..4).map(|_| keyed("q", "acme")).collect()).await;
    let t = lease_one(&mut ca, "q").await;
    fail_with(
        &mut ca,
        &t,
        cooldown(pb::CooldownScope::ConcurrencyKey, Duration::from_secs(30)),
    )
    .await
    .expect("fail with cooldown");
    // The other replica reads which queues have cooldowns (within 500 ms by itself).
    b.service().queues_reload().await.unwrap();
    assert!(lease(&mut cb, "q", 10).await.is_empty());
    assert!(lease(&mut ca, "q", 10).await.is_empty());
    advance(&a, &b, Duration::from_millis(29_999));
    assert!(lease(&mut cb, "q", 10).await.is_empty());
    advance(&a, &b, Duration::from_millis(1));
    assert_eq!(lease(&mut cb, "q", 10).await.len(), 4);
    assert!(cooldowns(&mut admin).await.is_empty());
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_is_shared_across_postgres_replicas() {
    a_bucket_is_shared_across_replicas(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_is_shared_across_mysql_replicas() {
    a_bucket_is_shared_across_replicas(Backend::Mysql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cooldown_holds_its_key_on_every_postgres_replica() {
    a_cooldown_holds_its_key_on_every_replica(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cooldown_holds_its_key_on_every_mysql_replica() {
    a_cooldown_holds_its_key_on_every_replica(Backend::Mysql).await;
}
