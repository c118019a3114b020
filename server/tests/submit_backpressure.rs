//! Backpressure on Submit, on both stores: a queue's max_pending and
//! max_pending_bytes refuse a call that would pass them (RESOURCE_EXHAUSTED with
//! RetryInfo and QuotaFailure, nothing stored), count the refusals on /metrics,
//! and take hostile values (the largest limits, a call larger than the limit).

mod common;

use std::net::SocketAddr;

use common::*;
use taskbroker_client::pb;
use tonic_types::StatusExt;

async fn scrape(addr: SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

async fn set_limits(app: &TestApp, queue: &str, max_pending: u64, max_pending_bytes: u64) {
    let mut admin = app.admin().await;
    let q = admin
        .update_queue(pb::UpdateQueueRequest {
            name: queue.into(),
            config: Some(pb::QueueConfig {
                max_pending,
                max_pending_bytes,
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["max_pending".into(), "max_pending_bytes".into()],
            }),
        })
        .await
        .expect("update queue")
        .into_inner()
        .queue
        .unwrap();
    let c = q.config.unwrap();
    assert_eq!(
        (c.max_pending, c.max_pending_bytes),
        (max_pending, max_pending_bytes)
    );
}

fn with_payload(queue: &str, n: usize) -> pb::TaskSpec {
    pb::TaskSpec {
        payload: vec![b'x'; n],
        ..spec(queue)
    }
}

async fn count(app: &TestApp, queue: &str) -> usize {
    let mut admin = app.admin().await;
    admin
        .list_tasks(pb::ListTasksRequest {
            queue: queue.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tasks
        .len()
}

async fn a_full_queue_refuses_with_a_retry_hint(b: Backend) {
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
    let mut c = app.broker().await;
    set_limits(&app, "jobs", 2, 0).await;
    submit(&mut c, vec![spec("jobs"), spec("jobs")]).await;
    // Another queue is not limited by this one's setting.
    submit_one(&mut c, spec("other")).await;
    let e = c
        .submit(pb::SubmitRequest {
            tasks: vec![spec("other"), spec("jobs")],
        })
        .await
        .expect_err("queue full");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    let retry = e.get_details_retry_info().expect("RetryInfo");
    assert!(retry.retry_delay.is_some_and(|d| !d.is_zero()));
    let quota = e.get_details_quota_failure().expect("QuotaFailure");
    assert_eq!(quota.violations[0].subject, "queue:jobs");
    assert!(quota.violations[0].description.contains("max_pending"));
    // Nothing of the call was stored, in either queue.
    assert_eq!(count(&app, "jobs").await, 2);
    assert_eq!(count(&app, "other").await, 1);
    let text = scrape(app.metrics_addr.unwrap()).await;
    assert!(
        text.contains("taskbroker_submit_refused_total{queue=\"jobs\"} 1"),
        "{text}"
    );
    // A leased task no longer waits: there is room again.
    lease_one(&mut c, "jobs").await;
    submit_one(&mut c, spec("jobs")).await;
    app.shutdown().await;
}

async fn payload_bytes_are_limited_too(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    set_limits(&app, "jobs", 0, 100).await;
    submit(
        &mut c,
        vec![with_payload("jobs", 60), with_payload("jobs", 40)],
    )
    .await;
    let e = c
        .submit(pb::SubmitRequest {
            tasks: vec![with_payload("jobs", 1)],
        })
        .await
        .expect_err("bytes full");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    assert!(e.get_details_retry_info().is_some());
    let quota = e.get_details_quota_failure().expect("QuotaFailure");
    assert!(
        quota.violations[0]
            .description
            .contains("max_pending_bytes")
    );
    // An empty payload adds no bytes.
    submit_one(&mut c, spec("jobs")).await;
    assert_eq!(count(&app, "jobs").await, 3);
    app.shutdown().await;
}

/// Hostile values: the largest limits never overflow, and a call that alone
/// exceeds a limit is refused without a retry hint (retrying cannot help).
async fn hostile_limits_and_oversized_calls(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    set_limits(&app, "jobs", u64::MAX, u64::MAX).await;
    submit(&mut c, vec![with_payload("jobs", 1000); 10]).await;
    set_limits(&app, "jobs", 20, 0).await;
    let e = c
        .submit(pb::SubmitRequest {
            tasks: vec![spec("jobs"); 21],
        })
        .await
        .expect_err("never fits");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    assert!(e.get_details_retry_info().is_none());
    assert!(e.get_details_quota_failure().is_some());
    // A fan-out counts its copies.
    let e = c
        .submit(pb::SubmitRequest {
            tasks: vec![pb::TaskSpec {
                fanout: Some(pb::Fanout {
                    copies: 11,
                    distinct_workers: false,
                }),
                ..spec("jobs")
            }],
        })
        .await
        .expect_err("copies counted");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    assert_eq!(count(&app, "jobs").await, 10);
    // Zero turns the limits off again.
    set_limits(&app, "jobs", 0, 0).await;
    submit(&mut c, vec![spec("jobs"); 21]).await;
    app.shutdown().await;
}

fn counts_read(text: &str, queue: &str) -> u64 {
    let series = format!("taskbroker_pending_counts_total{{queue=\"{queue}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// The check does not count the backlog on every Submit: while the clock
/// stands still, 60 Submits read one count of the queue (kept right by what the
/// broker admitted and leased since), and a count a second old is read again.
async fn the_backlog_is_counted_once_a_second_not_per_submit(b: Backend) {
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
    let metrics = app.metrics_addr.unwrap();
    let mut c = app.broker().await;
    set_limits(&app, "jobs", 60, 0).await;
    for _ in 0..60 {
        submit_one(&mut c, spec("jobs")).await;
    }
    assert_eq!(counts_read(&scrape(metrics).await, "jobs"), 1);
    // The 61st is refused from the view the Submits kept, not from a new count.
    let e = c
        .submit(pb::SubmitRequest {
            tasks: vec![spec("jobs")],
        })
        .await
        .expect_err("queue full");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    assert!(e.message().contains("60 waiting tasks"), "{}", e.message());
    // A task this broker leased leaves the view at once.
    lease_one(&mut c, "jobs").await;
    submit_one(&mut c, spec("jobs")).await;
    let text = scrape(metrics).await;
    assert_eq!(counts_read(&text, "jobs"), 1, "{text}");
    // A queue without limits is never counted.
    submit_one(&mut c, spec("other")).await;
    assert_eq!(counts_read(&scrape(metrics).await, "other"), 0);
    // Once the count is a second old, the next Submit reads a new one, and
    // what the view did not see (a task cancelled) is seen then.
    let mut admin = app.admin().await;
    let waiting = admin
        .list_tasks(pb::ListTasksRequest {
            queue: "jobs".into(),
            states: vec![pb::TaskState::Ready as i32],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tasks;
    admin
        .cancel_task(pb::CancelTaskRequest {
            task_id: waiting[0].id.clone(),
        })
        .await
        .unwrap();
    c.submit(pb::SubmitRequest {
        tasks: vec![spec("jobs")],
    })
    .await
    .expect_err("the cancel is not seen before the next count");
    app.advance(std::time::Duration::from_secs(1));
    submit_one(&mut c, spec("jobs")).await;
    assert_eq!(counts_read(&scrape(metrics).await, "jobs"), 2);
    app.shutdown().await;
}

all_backends!(
    a_full_queue_refuses_with_a_retry_hint,
    payload_bytes_are_limited_too,
    hostile_limits_and_oversized_calls,
    the_backlog_is_counted_once_a_second_not_per_submit,
);

async fn refused(addr: SocketAddr, queue: &str) -> bool {
    scrape(addr).await.contains(&format!(
        "taskbroker_submit_refused_total{{queue=\"{queue}\"}} 1"
    ))
}

/// client-rs's submit waits out a full queue with the hinted delay, and gives
/// up at once on a call that can never fit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_retries_a_full_queue() {
    use taskbroker_client::{Client, TaskSpec};
    let app = spawn_app_with(
        Backend::Sqlite,
        Options {
            metrics: true,
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let metrics = app.metrics_addr.unwrap();
    set_limits(&app, "jobs", 1, 0).await;
    let client = Client::connect(app.url()).await.unwrap();
    client
        .submit(TaskSpec::new("jobs", b"a".to_vec()))
        .await
        .unwrap();
    let second = {
        let client = client.clone();
        tokio::spawn(async move { client.submit(TaskSpec::new("jobs", b"b".to_vec())).await })
    };
    // Refused once (the refusal is counted), then room is made.
    let give_up = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while !refused(metrics, "jobs").await {
        assert!(tokio::time::Instant::now() < give_up, "never refused");
        tokio::task::yield_now().await;
    }
    let mut c = app.broker().await;
    lease_one(&mut c, "jobs").await;
    let done = second.await.unwrap().expect("retried after the hint");
    assert!(!done.task_id.is_empty());
    // A call larger than the limit is not retried: one more refusal only.
    let e = client
        .submit_many(
            vec![TaskSpec::new("other", Vec::new()); 1]
                .into_iter()
                .chain([
                    TaskSpec::new("jobs", Vec::new()),
                    TaskSpec::new("jobs", Vec::new()),
                ]),
        )
        .await
        .expect_err("never fits");
    assert!(format!("{e}").contains("max_pending"), "{e}");
    assert!(
        scrape(metrics)
            .await
            .contains("taskbroker_submit_refused_total{queue=\"jobs\"} 2")
    );
    app.shutdown().await;
}
