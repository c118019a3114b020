//! Fault tests: the broker process is killed with SIGKILL under load and started
//! again (as a supervisor would). Nothing acknowledged is lost, no task is
//! completed twice, every task ends SUCCEEDED, with no help but the restart.
//! See `fault_harness` for the producers, workers and checks.

mod common;
mod fault_harness;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use fault_harness::*;
use taskbroker_client::pb;
use tokio_util::sync::CancellationToken;

/// Retries soon and often: a lease whose reply died with a broker expires and
/// counts as an attempt, and several kills must not spend a task's budget.
fn patient_retry() -> Option<pb::RetryPolicy> {
    Some(pb::RetryPolicy {
        max_attempts: 50,
        initial_backoff: Some(prost_types::Duration {
            seconds: 0,
            nanos: 10_000_000,
        }),
        jitter: Some(0.0),
        ..Default::default()
    })
}

fn progress(l: &Ledger) -> usize {
    l.acked.lock().unwrap().len() + l.completed.lock().unwrap().len()
}

async fn until_progress(ledger: &Arc<Ledger>, by: usize, what: &str) {
    let from = progress(ledger);
    let l = ledger.clone();
    wait_until(what, Duration::from_secs(90), move || {
        let l = l.clone();
        async move { progress(&l) >= from + by }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_postgres_replicas_survive_a_sigkill_under_load_and_a_restart() {
    two_replicas_survive_a_sigkill(Backend::Postgres).await;
}

/// The same on MySQL/MariaDB (row locks, the polled wake-ups).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_mysql_replicas_survive_a_sigkill_under_load_and_a_restart() {
    two_replicas_survive_a_sigkill(Backend::Mysql).await;
}

async fn two_replicas_survive_a_sigkill(backend: Backend) {
    let Some(db) = test_db(backend).await else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let mut a = Broker::start("replica-a", logs.path(), &db.url, &[]).await;
    let b = Broker::start("replica-b", logs.path(), &db.url, &[]).await;
    let urls = vec![a.url(), b.url()];
    let ledger = Arc::new(Ledger::default());
    let stop = CancellationToken::new();
    let workers = spawn_workers(4, &urls, "kill", WorkerPlan::default(), &ledger, &stop);
    let producer = tokio::spawn(produce(
        urls.clone(),
        "kill".into(),
        2000,
        20,
        ledger.clone(),
        Instant::now() + Duration::from_secs(120),
        patient_retry(),
    ));
    until_progress(&ledger, 400, "load before the kill").await;
    a.kill9().await;
    // Replica B carries on alone: submits and completions still move.
    until_progress(&ledger, 400, "progress through the surviving replica").await;
    a.spawn().await;
    tokio::time::timeout(Duration::from_secs(120), producer)
        .await
        .expect("the producer finishes")
        .expect("the producer did not panic");
    // Checked through the restarted replica: it serves again.
    settle_and_check(&a.url(), &db.url, "kill", &ledger, Duration::from_secs(120)).await;
    stop_workers(stop, workers).await;
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_sigkills_in_a_row_lose_nothing_and_complete_nothing_twice() {
    let db = test_db(Backend::Sqlite).await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    let mut broker = Broker::start("broker", logs.path(), &db.url, &[]).await;
    let urls = vec![broker.url()];
    let ledger = Arc::new(Ledger::default());
    let stop = CancellationToken::new();
    let workers = spawn_workers(3, &urls, "kill5", WorkerPlan::default(), &ledger, &stop);
    let producer = tokio::spawn(produce(
        urls.clone(),
        "kill5".into(),
        1500,
        25,
        ledger.clone(),
        Instant::now() + Duration::from_secs(150),
        patient_retry(),
    ));
    for round in 1..=5 {
        until_progress(&ledger, 150, &format!("load before kill {round}")).await;
        broker.kill9().await;
        broker.spawn().await;
    }
    tokio::time::timeout(Duration::from_secs(150), producer)
        .await
        .expect("the producer finishes")
        .expect("the producer did not panic");
    settle_and_check(
        &broker.url(),
        &db.url,
        "kill5",
        &ledger,
        Duration::from_secs(120),
    )
    .await;
    stop_workers(stop, workers).await;
}
