//! `/metrics` shows queue depths from a count taken off the scrape
//! (`server/src/depth.rs`), right after every kind of change and on every replica;
//! and a Postgres replica does not act on its own wake-up notifications while it
//! still hears every other replica's.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use taskbroker_client::pb;

async fn scrape(addr: SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out
}

/// The depth of every state of `queue` on the scrape `text`, in the order
/// scheduled, ready, leased, succeeded, dead, cancelled.
fn depths(text: &str, queue: &str) -> [i64; 6] {
    let states = [
        "scheduled",
        "ready",
        "leased",
        "succeeded",
        "dead",
        "cancelled",
    ];
    states.map(|state| {
        let prefix = format!("taskbroker_queue_depth{{queue=\"{queue}\",state=\"{state}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map(|v| v.trim().parse().unwrap())
            .unwrap_or(0)
    })
}

/// Counts on every scrape (as a scrape of a broker with `max_age` zero does).
fn exact() -> Options {
    Options {
        metrics: true,
        metrics_depth_max_age: Some(Duration::ZERO),
        ..Options::default()
    }
}

async fn complete(
    c: &mut pb::broker_service_client::BrokerServiceClient<tonic::transport::Channel>,
    t: &pb::LeasedTask,
) {
    c.complete(pb::CompleteRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
        result: vec![],
        lease_next: None,
    })
    .await
    .unwrap();
}

async fn fail_for_good(
    c: &mut pb::broker_service_client::BrokerServiceClient<tonic::transport::Channel>,
    t: &pb::LeasedTask,
) {
    c.fail(pb::FailRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
        non_retryable: true,
        ..Default::default()
    })
    .await
    .unwrap();
}

async fn the_depth_gauges_follow_submits_leases_settles_and_cancels(b: Backend) {
    let Some(app) = spawn_app_with(b, exact()).await else {
        return;
    };
    let m = app.metrics_addr.unwrap();
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    let mut specs = vec![spec("d"); 5];
    specs.push(pb::TaskSpec {
        run_at: ts(later),
        ..spec("d")
    });
    let ids = submit(&mut c, specs).await;
    assert_eq!(depths(&scrape(m).await, "d"), [1, 5, 0, 0, 0, 0]);
    let leased = lease(&mut c, "d", 3).await;
    assert_eq!(depths(&scrape(m).await, "d"), [1, 2, 3, 0, 0, 0]);
    complete(&mut c, &leased[0]).await;
    assert_eq!(depths(&scrape(m).await, "d"), [1, 2, 2, 1, 0, 0]);
    fail_for_good(&mut c, &leased[1]).await;
    assert_eq!(depths(&scrape(m).await, "d"), [1, 2, 1, 1, 1, 0]);
    let pending: Vec<&String> = ids
        .iter()
        .filter(|id| !leased.iter().any(|l| &&l.task_id == id))
        .collect();
    admin
        .cancel_task(pb::CancelTaskRequest {
            task_id: pending[0].clone(),
        })
        .await
        .unwrap();
    let text = scrape(m).await;
    let d = depths(&text, "d");
    // The cancelled one was ready or the scheduled one: either way one fewer pending.
    assert_eq!(d[0] + d[1], 2, "{text}");
    assert_eq!(d[2..], [1, 1, 1, 1], "{text}");
    assert!(
        text.contains("taskbroker_queue_depth_age_seconds "),
        "{text}"
    );
    app.shutdown().await;
}

/// With a `max_age`, a scrape answers from the last count and does not count
/// again while that count is younger: the depths lag, by at most `max_age` (here
/// an hour, so the lag is certain), and the age gauge says by how much.
async fn a_scrape_answers_from_the_last_count_while_it_is_young(b: Backend) {
    let opts = Options {
        metrics: true,
        metrics_depth_max_age: Some(Duration::from_secs(3600)),
        ..Options::default()
    };
    let Some(app) = spawn_app_with(b, opts).await else {
        return;
    };
    let m = app.metrics_addr.unwrap();
    let mut c = app.broker().await;
    submit(&mut c, vec![spec("s")]).await;
    // The first scrape counts (there is no count yet).
    assert_eq!(depths(&scrape(m).await, "s")[1], 1);
    submit(&mut c, vec![spec("s")]).await;
    let text = scrape(m).await;
    assert_eq!(depths(&text, "s")[1], 1, "the young count is shown");
    // Counters are not part of the count: they are current.
    assert!(
        text.contains("taskbroker_tasks_submitted_total{queue=\"s\"} 2"),
        "{text}"
    );
    app.shutdown().await;
}

all_backends!(
    the_depth_gauges_follow_submits_leases_settles_and_cancels,
    a_scrape_answers_from_the_last_count_while_it_is_young,
);

/// Two replicas on one Postgres: changes made through either show on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_replicas_show_the_depths_of_changes_made_through_either() {
    let Some(db) = test_db(Backend::Postgres).await else {
        return;
    };
    let db = Arc::new(db);
    let a = spawn_on(db.clone(), exact()).await;
    let b = spawn_on(db, exact()).await;
    let (mut ca, mut cb) = (a.broker().await, b.broker().await);
    submit(&mut ca, vec![spec("r"); 3]).await;
    let last = submit(&mut cb, vec![spec("r"); 3]).await;
    let la = lease(&mut ca, "r", 2).await;
    let lb = lease(&mut cb, "r", 2).await;
    complete(&mut cb, &la[0]).await;
    fail_for_good(&mut ca, &lb[0]).await;
    // Leases go in submission order: the last task submitted is the one left.
    lease(&mut cb, "r", 1).await;
    let mut admin = a.admin().await;
    admin
        .cancel_task(pb::CancelTaskRequest {
            task_id: last[2].clone(),
        })
        .await
        .unwrap();
    let want = [0, 0, 3, 1, 1, 1];
    for app in [&a, &b] {
        let text = scrape(app.metrics_addr.unwrap()).await;
        assert_eq!(depths(&text, "r"), want, "{text}");
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// Returns once `app`'s listener has received at least `n` notifications, `own`
/// of them its own (bounded: panics after 20 s).
async fn until_received(
    app: &TestApp,
    n: u64,
    own: u64,
) -> taskbroker_server::store::NotificationStats {
    let broker = app.service();
    let give_up = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let s = broker.store().notification_stats();
        if s.received >= n && s.own_skipped >= own {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "never received {n} notifications, {own} own: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A replica skips the wake-up notifications it sent itself (its broker woke its
/// own waiters when it committed) and still acts on every other replica's: a
/// long-poll on B wakes for a submit through A, and the other way round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_skips_its_own_wake_ups_and_never_another_replicas() {
    let Some(db) = test_db(Backend::Postgres).await else {
        return;
    };
    let db = Arc::new(db);
    let real = || Options {
        manual_clock: false,
        metrics: true,
        ..Options::default()
    };
    let a = spawn_on(db.clone(), real()).await;
    let b = spawn_on(db, real()).await;
    for (n, (from, to)) in [(&a, &b), (&b, &a)].into_iter().enumerate() {
        let queue = format!("x{n}");
        let mut waiter = to.broker().await;
        let q = queue.clone();
        let poll = tokio::spawn(async move {
            let mut req = lease_req(&q, 1);
            // An empty answer (at the end of the wait) means the wake-up was lost.
            req.wait = secs(60);
            waiter.lease(req).await.unwrap().into_inner().tasks
        });
        to.until_waiting(1).await;
        let id = submit_one(&mut from.broker().await, spec(&queue)).await;
        let got = tokio::time::timeout(Duration::from_secs(60), poll)
            .await
            .expect("woken by the other replica's notification")
            .unwrap();
        assert_eq!(got[0].task_id, id);
    }
    // Each replica heard both submits' notifications: its own one skipped, the
    // other one acted on.
    for app in [&a, &b] {
        let s = until_received(app, 2, 1).await;
        assert_eq!((s.received, s.own_skipped), (2, 1), "{s:?}");
        let text = scrape(app.metrics_addr.unwrap()).await;
        assert!(
            text.contains("taskbroker_notifications_own_skipped_total 1"),
            "{text}"
        );
    }
    a.shutdown().await;
    b.shutdown().await;
}
