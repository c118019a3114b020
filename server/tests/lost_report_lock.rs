//! A report that loses its lease (LEASE_LOST) ends its transaction before it
//! answers, so the row lock it took never hides a ready task from a lease on
//! another connection or replica. The test failed while the lock outlived the
//! answer.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::*;
use taskbroker_server::domain::RetryPolicy;
use taskbroker_server::store::{self, FailParams, LeaseParams, NewTask, Settled};

fn lease_params(now: DateTime<Utc>) -> LeaseParams {
    LeaseParams {
        routing: Default::default(),
        max_reply_bytes: 4 << 20,
        queues: vec!["q".into()],
        max_tasks: 1,
        worker_id: "w".into(),
        worker_address: "127.0.0.1:1".into(),
        lease_duration: Duration::from_secs(30),
        now,
    }
}

/// On Postgres, Fail, Checkpoint and the checked Complete path lock the task row
/// (`SELECT ... FOR UPDATE`) and, when the lease is lost, return without ending
/// the transaction. The row stays locked until sqlx flushes the rollback on the
/// returned connection, and a lease in that window (here: another replica's)
/// skips the ready task (`FOR UPDATE SKIP LOCKED`) and answers empty. The model
/// test met it as a lease that found nothing while a task was ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_report_on_postgres_never_hides_a_ready_task_from_a_lease() {
    let Some(db) = test_db(Backend::Postgres).await else {
        return;
    };
    let a = store::connect(&db.url, 4).await.expect("connect");
    a.migrate().await.expect("migrate");
    let b = store::connect(&db.url, 4).await.expect("connect");
    let now = DateTime::from_timestamp_millis(1_800_000_000_000).unwrap();
    let mut missed = 0;
    for n in 0..200 {
        let id = format!("00000000-0000-7000-8000-{n:012}");
        let task = NewTask {
            routing: Default::default(),
            id: id.clone(),
            queue: "q".into(),
            key: None,
            payload: vec![],
            priority: 0,
            run_at: now,
            deadline: None,
            retry: RetryPolicy::default(),
            metadata: BTreeMap::new(),
            concurrency_key: None,
            checkpoint: None,
        };
        a.task_insert_many(&[task], now).await.unwrap();
        // A report with a token that holds no lease: LEASE_LOST.
        let lost = a
            .task_fail(&FailParams {
                prefer_same_worker: false,
                task_id: id.clone(),
                lease_token: "never-issued".into(),
                error: "late".into(),
                non_retryable: false,
                retry_after: None,
                now,
                jitter_unit: 0.5,
            })
            .await
            .unwrap();
        assert_eq!(lost, Settled::LeaseLost);
        let got = b.task_lease_available(&lease_params(now)).await.unwrap();
        if got.is_empty() {
            missed += 1;
            // Take it now that the lock is gone, so the next round starts clean.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let got = b.task_lease_available(&lease_params(now)).await.unwrap();
            assert_eq!(got.len(), 1, "the task is there once the lock is gone");
        }
    }
    assert_eq!(missed, 0, "leases that missed a ready task, of 200");
}
