//! Helpers of the admission tests: queue settings calls and worker loops.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use taskbroker_client::pb;
use taskbroker_client::pb::admin_service_client::AdminServiceClient;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use tonic::transport::Channel;

use super::common::*;

pub fn update(name: &str, config: pb::QueueConfig, mask: &[&str]) -> pb::UpdateQueueRequest {
    pb::UpdateQueueRequest {
        name: name.into(),
        config: Some(config),
        update_mask: Some(prost_types::FieldMask {
            paths: mask.iter().map(|p| p.to_string()).collect(),
        }),
    }
}

pub async fn set_queue(
    admin: &mut AdminServiceClient<Channel>,
    name: &str,
    config: pb::QueueConfig,
    mask: &[&str],
) -> pb::Queue {
    admin
        .update_queue(update(name, config, mask))
        .await
        .expect("update queue")
        .into_inner()
        .queue
        .expect("queue")
}

pub async fn get_queue(admin: &mut AdminServiceClient<Channel>, name: &str) -> pb::Queue {
    admin
        .get_queue(pb::GetQueueRequest { name: name.into() })
        .await
        .expect("get queue")
        .into_inner()
        .queue
        .expect("queue")
}

pub async fn pause(admin: &mut AdminServiceClient<Channel>, name: &str, paused: bool) {
    let config = pb::QueueConfig {
        paused,
        ..Default::default()
    };
    set_queue(admin, name, config, &["paused"]).await;
}

pub fn keyed(queue: &str, key: &str) -> pb::TaskSpec {
    pb::TaskSpec {
        concurrency_key: key.into(),
        ..spec(queue)
    }
}

pub async fn complete(c: &mut BrokerServiceClient<Channel>, t: &pb::LeasedTask) {
    c.complete(pb::CompleteRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
        ..Default::default()
    })
    .await
    .expect("complete");
}

pub struct WorkReport {
    pub completed: HashSet<String>,
    /// The most leases of one key this test saw held at once (counted from the
    /// lease's answer to just before its Complete: inside the broker's own span).
    pub max_in_flight_per_key: usize,
}

/// `workers` workers (spread over `apps`, the replicas) lease up to `batch`
/// tasks of `queue` (long-polling) and complete each, until `total` are done.
pub async fn run_workers(
    apps: &[&TestApp],
    queue: &str,
    workers: usize,
    batch: u32,
    total: usize,
) -> WorkReport {
    let in_flight: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let max_seen = Arc::new(Mutex::new(0usize));
    let done: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut handles = Vec::new();
    for w in 0..workers {
        let mut c = apps[w % apps.len()].broker().await;
        let (in_flight, max_seen, done) = (in_flight.clone(), max_seen.clone(), done.clone());
        let queue = queue.to_string();
        handles.push(tokio::spawn(async move {
            let give_up = tokio::time::Instant::now() + Duration::from_secs(120);
            while done.lock().unwrap().len() < total {
                assert!(tokio::time::Instant::now() < give_up, "workers stalled");
                let tasks = c
                    .lease(pb::LeaseRequest {
                        worker_id: format!("w{w}"),
                        wait: secs(1),
                        ..lease_req(&queue, batch)
                    })
                    .await
                    .expect("lease")
                    .into_inner()
                    .tasks;
                for t in &tasks {
                    let mut m = in_flight.lock().unwrap();
                    let n = m.entry(t.concurrency_key.clone()).or_default();
                    *n += 1;
                    let mut max = max_seen.lock().unwrap();
                    *max = (*max).max(*n);
                }
                for t in &tasks {
                    tokio::task::yield_now().await;
                    *in_flight
                        .lock()
                        .unwrap()
                        .get_mut(&t.concurrency_key)
                        .expect("counted") -= 1;
                    complete(&mut c, t).await;
                    assert!(
                        done.lock().unwrap().insert(t.task_id.clone()),
                        "completed twice"
                    );
                }
            }
        }));
    }
    for h in handles {
        h.await.expect("worker");
    }
    let completed = done.lock().unwrap().clone();
    let max_in_flight_per_key = *max_seen.lock().unwrap();
    WorkReport {
        completed,
        max_in_flight_per_key,
    }
}

/// `workers` workers lease and complete one task at a time from `queue` for
/// `run`; returns the leases granted and the time they took.
pub async fn lease_for(
    app: &TestApp,
    queue: &str,
    workers: usize,
    run: Duration,
) -> (usize, Duration) {
    let count = Arc::new(Mutex::new(0usize));
    let start = tokio::time::Instant::now();
    let end = start + run;
    let mut handles = Vec::new();
    for w in 0..workers {
        let mut c = app.broker().await;
        let count = count.clone();
        let queue = queue.to_string();
        handles.push(tokio::spawn(async move {
            loop {
                let left = end.saturating_duration_since(tokio::time::Instant::now());
                if left.is_zero() {
                    return;
                }
                let tasks = c
                    .lease(pb::LeaseRequest {
                        worker_id: format!("w{w}"),
                        wait: Some(prost_types::Duration {
                            seconds: 0,
                            nanos: left.as_nanos().min(500_000_000) as i32,
                        }),
                        ..lease_req(&queue, 1)
                    })
                    .await
                    .expect("lease")
                    .into_inner()
                    .tasks;
                if tokio::time::Instant::now() <= end {
                    *count.lock().unwrap() += tasks.len();
                }
                for t in &tasks {
                    complete(&mut c, t).await;
                }
            }
        }));
    }
    for h in handles {
        h.await.expect("worker");
    }
    let n = *count.lock().unwrap();
    (n, start.elapsed().min(run))
}
