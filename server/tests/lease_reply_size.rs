//! Lease replies fit the client: whatever the tasks hold, a reply (of Lease, of
//! a settle's lease_next, of a long-poll a Submit served) encodes to at most
//! `limits.max_lease_reply_bytes`, so a client with gRPC's default 4 MiB
//! receive limit decodes it, and what did not fit is leased by the next call,
//! never left leased undelivered.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use prost::Message;
use taskbroker_client::pb;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use tonic::transport::Channel;

/// gRPC's default receive limit, the broker's default reply budget.
const CLIENT_LIMIT: usize = 4 << 20;
const GUARD: Duration = Duration::from_secs(60);

/// A client with the default limits (it refuses a reply over 4 MiB).
async fn default_client(app: &TestApp) -> BrokerServiceClient<Channel> {
    BrokerServiceClient::connect(app.url()).await.unwrap()
}

/// A queue name of the longest allowed (128 characters).
fn long_queue(tag: &str) -> String {
    format!("{tag}-{}", "q".repeat(127 - tag.len()))
}

/// A task of about 3,600 payload bytes with the longest key (512) and
/// concurrency key (256).
fn large(queue: &str, n: usize) -> pb::TaskSpec {
    pb::TaskSpec {
        payload: vec![b'p'; 3600],
        key: format!("{n:06}-{}", "k".repeat(505)),
        concurrency_key: format!("{n:06}-{}", "c".repeat(249)),
        ..spec(queue)
    }
}

async fn submit_large(c: &mut BrokerServiceClient<Channel>, queue: &str, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(250) {
        let tasks = chunk.iter().map(|&i| large(queue, i)).collect();
        submit(c, tasks).await;
    }
}

/// The tasks of one reply, checked: it is within the limit and each task is new.
fn take(
    delivered: &mut HashSet<String>,
    encoded: usize,
    tasks: Vec<pb::LeasedTask>,
) -> Vec<pb::LeasedTask> {
    assert!(encoded <= CLIENT_LIMIT, "a reply of {encoded} bytes");
    for t in &tasks {
        assert!(delivered.insert(t.task_id.clone()), "{} twice", t.task_id);
        assert_eq!(t.attempt, 1, "no attempt was spent on an undelivered lease");
    }
    tasks
}

/// Leases up to `max` tasks of `queue`, checking that the reply is within the limit.
async fn lease_within(
    c: &mut BrokerServiceClient<Channel>,
    queue: &str,
    max: u32,
) -> Vec<pb::LeasedTask> {
    let reply = c
        .lease(lease_req(queue, max))
        .await
        .expect("lease")
        .into_inner();
    let len = reply.encoded_len();
    assert!(len <= CLIENT_LIMIT, "a reply of {len} bytes");
    reply.tasks
}

/// Leases `queue` until it has nothing ready, checking every reply.
async fn drain(c: &mut BrokerServiceClient<Channel>, queue: &str, delivered: &mut HashSet<String>) {
    for _ in 0..20 {
        let reply = c
            .lease(lease_req(queue, 1000))
            .await
            .expect("lease")
            .into_inner();
        let len = reply.encoded_len();
        if take(delivered, len, reply.tasks).is_empty() {
            return;
        }
    }
    panic!("the queue did not drain");
}

async fn a_lease_of_a_thousand_large_tasks_fits_a_default_client(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let queue = long_queue("lease");
    let mut c = default_client(&app).await;
    submit_large(&mut c, &queue, 1000).await;
    let mut delivered = HashSet::new();
    let reply = c
        .lease(lease_req(&queue, 1000))
        .await
        .expect("lease")
        .into_inner();
    let len = reply.encoded_len();
    let first = take(&mut delivered, len, reply.tasks);
    assert!(
        first.len() > 500,
        "the reply is cut near its budget: {}",
        first.len()
    );
    assert!(first.len() < 1000, "1000 of these tasks are over 4 MiB");
    drain(&mut c, &queue, &mut delivered).await;
    assert_eq!(delivered.len(), 1000, "every task is delivered");
    app.shutdown().await;
}

/// The tasks of Complete's, CompleteMany's and Fail's lease_next, the settle's
/// own answer included, fit too.
async fn lease_next_replies_fit_a_default_client(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let queue = long_queue("next");
    let mut c = default_client(&app).await;
    submit_large(&mut c, &queue, 3000).await;
    let mut delivered = HashSet::new();
    let mut held = take(&mut delivered, 0, lease(&mut c, &queue, 1).await);
    let one = held.pop().unwrap();
    let reply = c
        .complete(pb::CompleteRequest {
            task_id: one.task_id.clone(),
            lease_token: one.lease_token.clone(),
            lease_next: Some(lease_req(&queue, 1000)),
            ..Default::default()
        })
        .await
        .expect("complete")
        .into_inner();
    let len = reply.encoded_len();
    let mut held = take(&mut delivered, len, reply.next_tasks);
    assert!(held.len() > 500, "{}", held.len());
    let failing = held.pop().unwrap();
    let reply = c
        .fail(pb::FailRequest {
            task_id: failing.task_id.clone(),
            lease_token: failing.lease_token.clone(),
            error_message: "e".repeat(1000),
            non_retryable: true,
            lease_next: Some(lease_req(&queue, 1000)),
            ..Default::default()
        })
        .await
        .expect("fail")
        .into_inner();
    let len = reply.encoded_len();
    let next = take(&mut delivered, len, reply.next_tasks);
    assert!(!next.is_empty());
    // A CompleteMany of many completions: its results share the reply.
    let completions = held
        .iter()
        .chain(&next)
        .take(1000)
        .map(|t| pb::CompleteRequest {
            task_id: t.task_id.clone(),
            lease_token: t.lease_token.clone(),
            ..Default::default()
        })
        .collect();
    let reply = c
        .complete_many(pb::CompleteManyRequest {
            completions,
            lease_next: Some(lease_req(&queue, 1000)),
        })
        .await
        .expect("complete many")
        .into_inner();
    let len = reply.encoded_len();
    assert!(!take(&mut delivered, len, reply.next_tasks).is_empty());
    drain(&mut c, &queue, &mut delivered).await;
    assert_eq!(delivered.len(), 3000, "every task is delivered");
    app.shutdown().await;
}

/// A long-poll a Submit hands its tasks to gets no more than fits.
async fn a_long_poll_served_by_a_large_submit_fits_a_default_client(b: Backend) {
    let settings = taskbroker_server::service::Settings {
        sync_match_postgres: true,
        ..Default::default()
    };
    let Some(app) = spawn_app_with(
        b,
        Options {
            settings,
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let queue = long_queue("sync");
    let mut waiter = default_client(&app).await;
    let req = pb::LeaseRequest {
        wait: secs(60),
        ..lease_req(&queue, 1000)
    };
    let poll = tokio::spawn(async move {
        let reply = waiter.lease(req).await.expect("lease").into_inner();
        (reply.encoded_len(), reply.tasks)
    });
    app.until_waiting(1).await;
    // One Submit of 1000 (the broker takes 16 MiB requests).
    let mut c = default_client(&app).await;
    submit(&mut c, (0..1000).map(|i| large(&queue, i)).collect()).await;
    let (len, tasks) = tokio::time::timeout(GUARD, poll).await.unwrap().unwrap();
    let mut delivered = HashSet::new();
    let got = take(&mut delivered, len, tasks);
    assert!(!got.is_empty());
    drain(&mut c, &queue, &mut delivered).await;
    assert_eq!(delivered.len(), 1000, "every task is delivered");
    app.shutdown().await;
}

/// A hostile producer and worker fill every field a reply carries to its
/// limit: payloads and checkpoints of 1 MiB, metadata of 64 entries and
/// 16 KiB, the longest queue, key and concurrency key, and the results of many
/// dependencies (1 MiB each for some); and hundreds of tasks whose metadata,
/// key and concurrency key are at their limits. Every reply stays within the limit;
/// results that do not fit are left out whole; every task is delivered.
async fn replies_of_tasks_at_every_limit_fit_a_default_client(b: Backend) {
    let opts = Options {
        manual_clock: true,
        ..Options::default()
    };
    let Some(app) = spawn_app_with(b, opts).await else {
        return;
    };
    let (queue, up) = (long_queue("max"), long_queue("up"));
    let mut c = default_client(&app).await;
    // Dependencies: three with results of 1 MiB, two hundred of 1,000 bytes.
    let ups = submit(&mut c, (0..203).map(|_| spec(&up)).collect()).await;
    let mut done = 0;
    while done < ups.len() {
        for t in lease_within(&mut c, &up, 1000).await {
            let n = if ups[..3].contains(&t.task_id) {
                1 << 20
            } else {
                1000
            };
            c.complete(pb::CompleteRequest {
                task_id: t.task_id,
                lease_token: t.lease_token,
                result: vec![b'r'; n],
                ..Default::default()
            })
            .await
            .expect("complete");
            done += 1;
        }
    }
    let metadata: std::collections::HashMap<String, String> = (0..64)
        .map(|i| (format!("m{i:02}"), "v".repeat(253)))
        .collect();
    let full = |n: usize, payload: usize, deps: &[String]| pb::TaskSpec {
        payload: vec![b'p'; payload],
        metadata: metadata.clone(),
        depends_on: deps.to_vec(),
        retry: retry_now(5),
        ..large(&queue, n)
    };
    let mut specs: Vec<pb::TaskSpec> = (0..4).map(|n| full(n, 1 << 20, &ups)).collect();
    specs.extend((4..8).map(|n| full(n, 0, &ups[3..])));
    submit(&mut c, specs).await;
    // Each is leased once, checkpointed at 1 MiB and failed, to come back
    // with its checkpoint an hour later.
    let mut failed = HashSet::new();
    while failed.len() < 8 {
        for t in lease_within(&mut c, &queue, 1000).await {
            c.checkpoint(pb::CheckpointRequest {
                task_id: t.task_id.clone(),
                lease_token: t.lease_token.clone(),
                checkpoint: vec![b'c'; 1 << 20],
                extend_by: None,
            })
            .await
            .expect("checkpoint");
            c.fail(pb::FailRequest {
                task_id: t.task_id.clone(),
                lease_token: t.lease_token,
                error_message: "again".into(),
                retry_after: secs(3600),
                ..Default::default()
            })
            .await
            .expect("fail");
            failed.insert(t.task_id);
        }
    }
    // And many tasks whose metadata, key and concurrency key are at their limits.
    for chunk in (100..700).collect::<Vec<_>>().chunks(150) {
        submit(&mut c, chunk.iter().map(|&n| full(n, 0, &[])).collect()).await;
    }
    app.advance(Duration::from_secs(3601));
    let mut delivered = Vec::new();
    while delivered.len() < 608 {
        let got = lease_within(&mut c, &queue, 1000).await;
        assert!(!got.is_empty(), "every task comes back");
        delivered.extend(got);
    }
    let retried: Vec<&pb::LeasedTask> = delivered
        .iter()
        .filter(|t| failed.contains(&t.task_id))
        .collect();
    assert_eq!(retried.len(), 8);
    assert!(retried.iter().all(|t| t.has_checkpoint && t.attempt == 2));
    assert!(
        delivered.iter().any(|t| !t.dependency_results.is_empty()),
        "results that fit are carried"
    );
    assert!(
        delivered.iter().any(|t| t.dependency_results.is_empty()),
        "results that do not fit are left out"
    );
    app.shutdown().await;
}

all_backends!(
    replies_of_tasks_at_every_limit_fit_a_default_client,
    a_lease_of_a_thousand_large_tasks_fits_a_default_client,
    lease_next_replies_fit_a_default_client,
    a_long_poll_served_by_a_large_submit_fits_a_default_client,
);
