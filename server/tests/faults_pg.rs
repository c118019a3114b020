//! Fault tests of the database under a Postgres broker: Postgres restarted mid-flight
//! (on a cluster of the test's own, so no other test notices), and every broker
//! connection terminated by `pg_terminate_backend`. Calls answer UNAVAILABLE
//! while the database is away, and the broker recovers by itself: nothing
//! acknowledged is lost, nothing completed twice, every task succeeds.

mod common;
mod fault_harness;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use fault_harness::*;
use taskbroker_client::pb;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use tokio_util::sync::CancellationToken;
use tonic::Code;

fn retry() -> Option<pb::RetryPolicy> {
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

/// A Postgres cluster of this test's own (scripts/pg.sh), stopped on drop.
struct OwnCluster {
    dir: PathBuf,
    url: String,
    _tmp: tempfile::TempDir,
}

fn pg_sh(args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/pg.sh");
    let out = std::process::Command::new(script)
        .args(args)
        .output()
        .expect("run scripts/pg.sh");
    assert!(
        out.status.success(),
        "scripts/pg.sh {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl OwnCluster {
    fn start() -> OwnCluster {
        let tmp = tempfile::Builder::new()
            .prefix("taskbroker-fault-pg")
            .tempdir()
            .unwrap();
        let dir = tmp.path().join("cluster");
        let printed = pg_sh(&["start", dir.to_str().unwrap()]);
        let url = printed
            .trim()
            .strip_prefix("export TASKBROKER_TEST_POSTGRES_URL=")
            .expect("pg.sh prints the URL")
            .to_string();
        OwnCluster {
            dir,
            url,
            _tmp: tmp,
        }
    }

    fn stop(&self) {
        pg_sh(&["stop", self.dir.to_str().unwrap()]);
    }

    fn resume(&self) {
        pg_sh(&["resume", self.dir.to_str().unwrap()]);
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_restart_mid_flight_is_survived() {
    if postgres_admin_url().is_none() {
        return; // no Postgres here (the test starts a cluster of its own)
    }
    let pg = tokio::task::spawn_blocking(OwnCluster::start)
        .await
        .unwrap();
    let logs = tempfile::tempdir().unwrap();
    let broker = Broker::start("broker", logs.path(), &pg.url, &[]).await;
    let urls = vec![broker.url()];
    let ledger = Arc::new(Ledger::default());
    let stop = CancellationToken::new();
    let workers = spawn_workers(3, &urls, "pgrestart", WorkerPlan::default(), &ledger, &stop);
    let producer = tokio::spawn(produce(
        urls.clone(),
        "pgrestart".into(),
        1500,
        20,
        ledger.clone(),
        Instant::now() + Duration::from_secs(150),
        retry(),
    ));
    until_progress(&ledger, 300, "load before the restart").await;
    let pg = tokio::task::spawn_blocking(move || {
        pg.stop();
        pg
    })
    .await
    .unwrap();
    // While Postgres is down, calls answer UNAVAILABLE at once: no hang, no INTERNAL.
    let mut c = BrokerServiceClient::new(channel(&broker.url()));
    let err = c
        .submit(pb::SubmitRequest {
            tasks: vec![spec("pgrestart-probe")],
        })
        .await
        .expect_err("no database, no submit");
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pg = tokio::task::spawn_blocking(move || {
        pg.resume();
        pg
    })
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_secs(150), producer)
        .await
        .expect("the producer finishes")
        .expect("the producer did not panic");
    settle_and_check(
        &broker.url(),
        &pg.url,
        "pgrestart",
        &ledger,
        Duration::from_secs(120),
    )
    .await;
    stop_workers(stop, workers).await;
    drop(broker);
    tokio::task::spawn_blocking(move || drop(pg)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminating_every_broker_connection_is_survived() {
    let Some(db) = test_db(Backend::Postgres).await else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let broker = Broker::start("broker", logs.path(), &db.url, &[]).await;
    let urls = vec![broker.url()];
    let ledger = Arc::new(Ledger::default());
    let stop = CancellationToken::new();
    let workers = spawn_workers(3, &urls, "terminate", WorkerPlan::default(), &ledger, &stop);
    let producer = tokio::spawn(produce(
        urls.clone(),
        "terminate".into(),
        1500,
        20,
        ledger.clone(),
        Instant::now() + Duration::from_secs(150),
        retry(),
    ));
    let name = db.url.rsplit('/').next().unwrap().to_string();
    let mut admin =
        <sqlx::PgConnection as sqlx::Connection>::connect(&postgres_admin_url().unwrap())
            .await
            .unwrap();
    for round in 1..=3 {
        until_progress(&ledger, 250, &format!("load before termination {round}")).await;
        let killed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = $1 AND pid <> pg_backend_pid()",
        )
        .bind(&name)
        .fetch_all(&mut admin)
        .await
        .unwrap();
        assert!(
            killed.iter().any(|k| *k),
            "round {round}: the broker had connections to terminate"
        );
    }
    tokio::time::timeout(Duration::from_secs(150), producer)
        .await
        .expect("the producer finishes")
        .expect("the producer did not panic");
    settle_and_check(
        &broker.url(),
        &db.url,
        "terminate",
        &ledger,
        Duration::from_secs(120),
    )
    .await;
    stop_workers(stop, workers).await;
}
