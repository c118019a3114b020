//! Flow store conformance, on SQLite and Postgres: dependencies (chains and
//! diamonds of 10,000 tasks, failure propagation, run_if_dependency_fails),
//! the event log of every transition, dead-letter notices, bulk operations.

mod common;

use std::collections::BTreeMap;

use std::sync::Arc;

use std::time::Duration;

use chrono::{DateTime, Utc};

use common::*;

use taskbroker_server::domain::event::EventKind;

use taskbroker_server::domain::{RetryPolicy, StoredState, TaskState};

use taskbroker_server::store::{
    self, BulkFilter, CompleteParams, FailParams, FlowInserted, FlowSpec, Inserted, LeaseParams,
    NewTask, Settled, Store, TaskFilter, TaskRecord,
};

async fn open(b: Backend) -> Option<(Arc<dyn Store>, TestDb)> {
    let db = test_db(b).await?;
    let s = store::connect(&db.url, 8).await.expect("connect");
    s.migrate().await.expect("migrate");
    Some((s, db))
}

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(1_800_000_000_000).unwrap()
}

fn at(ms: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::milliseconds(ms)
}

fn id(n: usize) -> String {
    format!("00000000-0000-7000-8000-{n:012}")
}

fn task(queue: &str, n: usize) -> NewTask {
    NewTask {
        id: id(n),
        queue: queue.into(),
        key: None,
        payload: n.to_string().into_bytes(),
        priority: 0,
        run_at: t0(),
        deadline: None,
        retry: RetryPolicy {
            max_attempts: 2,
            initial_backoff: Duration::ZERO,
            jitter: 0.0,
            ..RetryPolicy::default()
        },
        metadata: BTreeMap::new(),
        routing: Default::default(),
        concurrency_key: None,
        checkpoint: None,
    }
}

fn after(deps: &[usize]) -> FlowSpec {
    FlowSpec {
        depends_on: deps.iter().map(|&n| id(n)).collect(),
        ..Default::default()
    }
}

fn lease(queue: &str, max: u32, now: DateTime<Utc>) -> LeaseParams {
    LeaseParams {
        queues: vec![queue.into()],
        max_tasks: max,
        max_reply_bytes: 64 << 20,
        worker_id: "w".into(),
        worker_address: "127.0.0.1:1".into(),
        lease_duration: Duration::from_secs(30),
        now,
        routing: Default::default(),
    }
}

async fn insert(s: &Arc<dyn Store>, tasks: &[NewTask], flows: &[FlowSpec]) -> Vec<Inserted> {
    match s.task_insert_flow(tasks, flows, t0(), None).await.unwrap() {
        FlowInserted::Done(r) => r,
        other => panic!("insert refused: {other:?}"),
    }
}

async fn get(s: &Arc<dyn Store>, n: usize) -> TaskRecord {
    s.task_get(&id(n)).await.unwrap().unwrap()
}

async fn complete_all(s: &Arc<dyn Store>, leased: &[TaskRecord], now: DateTime<Utc>) {
    let ps: Vec<CompleteParams> = leased
        .iter()
        .map(|t| CompleteParams {
            task_id: t.id.clone(),
            lease_token: t.lease_token.clone().unwrap(),
            result: Vec::new(),
            now,
        })
        .collect();
    for r in s.task_complete_many(&ps).await.unwrap() {
        assert!(matches!(r, Settled::Applied(_)), "{r:?}");
    }
}

async fn fail_for_good(s: &Arc<dyn Store>, t: &TaskRecord, now: DateTime<Utc>) {
    let r = s
        .task_fail(&FailParams {
            task_id: t.id.clone(),
            lease_token: t.lease_token.clone().unwrap(),
            error: "boom".into(),
            non_retryable: true,
            retry_after: None,
            now,
            jitter_unit: 0.5,
            prefer_same_worker: false,
        })
        .await
        .unwrap();
    assert!(matches!(r, Settled::Applied(_)), "{r:?}");
}

/// Reads events after `after` until `n` are final (on Postgres, transactions of
/// other tests on the same cluster hold the horizon until they end; bounded).
async fn read_final(s: &Arc<dyn Store>, after: i64, n: usize) -> Vec<store::EventRecord> {
    let give_up = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let events = s.event_read(after, 1000).await.unwrap();
        if events.len() >= n || tokio::time::Instant::now() > give_up {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// Dependencies: chains, diamonds, failures cascading and dependencies finished at submit.
#[path = "flow_conformance/dependencies.rs"]
mod dependencies;
// Events and dead-letter notices, bulk operations and retry schedules.
#[path = "flow_conformance/events.rs"]
mod events;
