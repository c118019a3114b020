//! ExplainTask on every store: the gate it names in each case, and the
//! details it gives (until, the holders of a key, how many lease first).

mod common;
#[path = "admission/helpers.rs"]
mod helpers;

use std::time::Duration;

use common::*;
use helpers::*;
use taskbroker_client::pb;
use taskbroker_client::pb::admin_service_client::AdminServiceClient;
use tonic::transport::Channel;

async fn explain(admin: &mut AdminServiceClient<Channel>, id: &str) -> Vec<pb::Gate> {
    admin
        .explain_task(pb::ExplainTaskRequest { task_id: id.into() })
        .await
        .expect("explain")
        .into_inner()
        .gates
}

fn kinds(gates: &[pb::Gate]) -> Vec<pb::GateKind> {
    gates
        .iter()
        .map(|g| pb::GateKind::try_from(g.kind).expect("known kind"))
        .collect()
}

async fn a_ready_task_alone_has_no_gate_and_a_leased_one_none_at_all(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    let id = submit_one(&mut broker, spec("q")).await;
    assert_eq!(kinds(&explain(&mut admin, &id).await), [pb::GateKind::None]);
    lease_one(&mut broker, "q").await;
    assert!(explain(&mut admin, &id).await.is_empty());
    let err = admin
        .explain_task(pb::ExplainTaskRequest {
            task_id: "nope".into(),
        })
        .await
        .expect_err("unknown");
    assert_eq!(err.code(), tonic::Code::NotFound);
    app.shutdown().await;
}

async fn a_future_run_at_and_a_retry_backoff_say_until_when(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    let at = app.clock.now_utc() + chrono::Duration::seconds(90);
    let later = submit_one(
        &mut broker,
        pb::TaskSpec {
            run_at: ts(at),
            ..spec("q")
        },
    )
    .await;
    let gates = explain(&mut admin, &later).await;
    assert_eq!(kinds(&gates), [pb::GateKind::RunAtInFuture]);
    assert_eq!(from_ts(&gates[0].until), at);

    let failing = submit_one(&mut broker, spec("r")).await;
    let t = lease_one(&mut broker, "r").await;
    broker
        .fail(pb::FailRequest {
            task_id: failing.clone(),
            lease_token: t.lease_token,
            retry_after: secs(60),
            ..Default::default()
        })
        .await
        .unwrap();
    let gates = explain(&mut admin, &failing).await;
    assert_eq!(kinds(&gates), [pb::GateKind::RetryBackoff]);
    assert_eq!(
        from_ts(&gates[0].until),
        app.clock.now_utc() + chrono::Duration::seconds(60)
    );
    app.shutdown().await;
}

async fn a_paused_queue_is_named(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    let id = submit_one(&mut broker, spec("q")).await;
    pause(&mut admin, "q", true).await;
    let gates = explain(&mut admin, &id).await;
    assert_eq!(kinds(&gates), [pb::GateKind::QueuePaused]);
    assert!(gates[0].detail.contains("paused"), "{}", gates[0].detail);
    app.shutdown().await;
}

async fn a_full_queue_and_a_full_key_are_named_with_the_holders(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    set_queue(
        &mut admin,
        "q",
        pb::QueueConfig {
            max_concurrent: 2,
            max_concurrent_per_key: 1,
            ..Default::default()
        },
        &["max_concurrent", "max_concurrent_per_key"],
    )
    .await;
    let ids = submit(
        &mut broker,
        vec![
            keyed("q", "u1"),
            keyed("q", "u1"),
            keyed("q", "u2"),
            keyed("q", "u3"),
        ],
    )
    .await;
    let held = lease_one(&mut broker, "q").await;
    assert_eq!(held.task_id, ids[0]);
    let gates = explain(&mut admin, &ids[1]).await;
    assert_eq!(kinds(&gates), [pb::GateKind::KeyConcurrencyFull]);
    assert_eq!(gates[0].holder_task_ids, [ids[0].clone()]);
    // u2 takes the second lease: the queue is full for u3.
    lease_one(&mut broker, "q").await;
    let gates = explain(&mut admin, &ids[3]).await;
    assert_eq!(kinds(&gates), [pb::GateKind::QueueConcurrencyFull]);
    app.shutdown().await;
}

async fn a_rate_limited_queue_says_when_the_next_token_comes(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    set_queue(
        &mut admin,
        "q",
        pb::QueueConfig {
            rate_limit: Some(pb::RateLimit {
                per_second: 0.5,
                burst: 1,
            }),
            ..Default::default()
        },
        &["rate_limit"],
    )
    .await;
    let ids = submit(&mut broker, vec![spec("q"), spec("q")]).await;
    lease_one(&mut broker, "q").await;
    let gates = explain(&mut admin, &ids[1]).await;
    assert_eq!(kinds(&gates), [pb::GateKind::RateLimited]);
    assert_eq!(
        from_ts(&gates[0].until),
        app.clock.now_utc() + chrono::Duration::seconds(2)
    );
    app.advance(Duration::from_secs(2));
    assert_eq!(
        kinds(&explain(&mut admin, &ids[1]).await),
        [pb::GateKind::None]
    );
    app.shutdown().await;
}

async fn a_task_behind_others_says_how_many_lease_first(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    let ids = submit(
        &mut broker,
        vec![
            spec("q"),
            pb::TaskSpec {
                priority: 5,
                ..spec("q")
            },
            spec("q"),
        ],
    )
    .await;
    let gates = explain(&mut admin, &ids[2]).await;
    assert_eq!(kinds(&gates), [pb::GateKind::WaitingBehind]);
    assert_eq!(gates[0].ahead, 2);
    assert_eq!(
        kinds(&explain(&mut admin, &ids[1]).await),
        [pb::GateKind::None]
    );
    app.shutdown().await;
}

/// Routing: a target no live worker of the queue matches, and a
/// retry reserved for the worker that failed it.
async fn an_unmatched_target_and_a_sticky_reservation_are_named(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    let gpu = submit_one(
        &mut broker,
        pb::TaskSpec {
            target: Some(pb::Target {
                worker_id: String::new(),
                labels: [("gpu".to_string(), "a100".to_string())].into(),
            }),
            ..spec("q")
        },
    )
    .await;
    // No worker has leased from q yet: nobody matches.
    let gates = explain(&mut admin, &gpu).await;
    assert_eq!(kinds(&gates), [pb::GateKind::NoMatchingWorker], "{gates:?}");
    assert!(gates[0].detail.contains("gpu=a100"), "{}", gates[0].detail);
    // A worker of q without the label changes nothing; one with it does.
    let plain = pb::LeaseRequest {
        worker_id: "cpu".into(),
        ..lease_req("q", 1)
    };
    assert!(
        broker
            .lease(plain)
            .await
            .unwrap()
            .into_inner()
            .tasks
            .is_empty()
    );
    assert_eq!(
        kinds(&explain(&mut admin, &gpu).await),
        [pb::GateKind::NoMatchingWorker]
    );
    let other = submit_one(&mut broker, spec("other")).await;
    let labelled = pb::LeaseRequest {
        worker_id: "g".into(),
        labels: [("gpu".to_string(), "a100".to_string())].into(),
        ..lease_req("other", 1)
    };
    let got = broker.lease(labelled).await.unwrap().into_inner().tasks;
    assert_eq!(got[0].task_id, other);
    // Worker g has the label but leases from another queue.
    assert_eq!(
        kinds(&explain(&mut admin, &gpu).await),
        [pb::GateKind::NoMatchingWorker]
    );

    let sticky = submit_one(
        &mut broker,
        pb::TaskSpec {
            sticky: Some(pb::StickyPolicy {
                strategy: pb::StickyStrategy::Hard as i32,
                timeout: None,
            }),
            ..spec("s")
        },
    )
    .await;
    let held = broker
        .lease(pb::LeaseRequest {
            worker_id: "w1".into(),
            ..lease_req("s", 1)
        })
        .await
        .unwrap()
        .into_inner()
        .tasks;
    broker
        .fail(pb::FailRequest {
            task_id: sticky.clone(),
            lease_token: held[0].lease_token.clone(),
            retry_after: secs(0),
            ..Default::default()
        })
        .await
        .unwrap();
    let gates = explain(&mut admin, &sticky).await;
    assert_eq!(kinds(&gates), [pb::GateKind::StickyReserved], "{gates:?}");
    assert!(gates[0].detail.contains("w1"), "{}", gates[0].detail);
    app.shutdown().await;
}

async fn lease_path(admin: &mut AdminServiceClient<Channel>, id: &str) -> pb::LeasePath {
    let e = admin
        .explain_task(pb::ExplainTaskRequest { task_id: id.into() })
        .await
        .expect("explain")
        .into_inner();
    pb::LeasePath::try_from(e.lease_path).expect("known path")
}

async fn metrics_text(app: &TestApp) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(app.metrics_addr.expect("metrics"))
        .await
        .unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// The lease path ExplainTask names for a waiting task is the `path` label the
/// leased-tasks metric counts it under once it is leased: plain, routed (a
/// target), gated (a queue with a concurrency limit); a leased task has none.
async fn the_lease_path_explain_names_is_the_one_the_metric_counts(b: Backend) {
    let Some(app) = spawn_app_with(
        b,
        Options {
            metrics: true,
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    let plain = submit_one(&mut broker, spec("p")).await;
    let routed = submit_one(
        &mut broker,
        pb::TaskSpec {
            target: Some(pb::Target {
                worker_id: "w1".into(),
                labels: Default::default(),
            }),
            ..spec("r")
        },
    )
    .await;
    set_queue(
        &mut admin,
        "g",
        pb::QueueConfig {
            max_concurrent: 5,
            ..Default::default()
        },
        &["max_concurrent"],
    )
    .await;
    let gated = submit_one(&mut broker, spec("g")).await;
    assert_eq!(lease_path(&mut admin, &plain).await, pb::LeasePath::Plain);
    assert_eq!(lease_path(&mut admin, &routed).await, pb::LeasePath::Routed);
    assert_eq!(lease_path(&mut admin, &gated).await, pb::LeasePath::Gated);
    for q in ["p", "r", "g"] {
        let got = broker
            .lease(pb::LeaseRequest {
                worker_id: "w1".into(),
                ..lease_req(q, 1)
            })
            .await
            .unwrap()
            .into_inner()
            .tasks;
        assert_eq!(got.len(), 1, "queue {q}");
    }
    let text = metrics_text(&app).await;
    for (q, path) in [("p", "plain"), ("r", "routed"), ("g", "gated")] {
        let line = format!("taskbroker_tasks_leased_total{{queue=\"{q}\",path=\"{path}\"}} 1");
        assert!(text.contains(&line), "{line} not in:\n{text}");
    }
    assert_eq!(
        lease_path(&mut admin, &plain).await,
        pb::LeasePath::Unspecified,
        "a leased task is not waiting"
    );
    app.shutdown().await;
}

all_backends!(
    the_lease_path_explain_names_is_the_one_the_metric_counts,
    a_ready_task_alone_has_no_gate_and_a_leased_one_none_at_all,
    an_unmatched_target_and_a_sticky_reservation_are_named,
    a_future_run_at_and_a_retry_backoff_say_until_when,
    a_paused_queue_is_named,
    a_full_queue_and_a_full_key_are_named_with_the_holders,
    a_rate_limited_queue_says_when_the_next_token_comes,
    a_task_behind_others_says_how_many_lease_first,
);
