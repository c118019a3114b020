//! Fault tests of the database under a MySQL/MariaDB broker: the server killed
//! with SIGKILL mid-flight and started again (a server of the test's own,
//! scripts/mysql.sh, so no other test notices). Calls answer UNAVAILABLE while
//! the database is away, and the broker recovers by itself: nothing
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

fn mysql_sh(args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/mysql.sh");
    let out = std::process::Command::new(script)
        .args(args)
        .output()
        .expect("run scripts/mysql.sh");
    assert!(
        out.status.success(),
        "scripts/mysql.sh {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A MariaDB server of this test's own, stopped on drop.
struct OwnServer {
    dir: PathBuf,
    url: String,
    _tmp: tempfile::TempDir,
}

impl OwnServer {
    fn start() -> OwnServer {
        let tmp = tempfile::Builder::new()
            .prefix("taskbroker-fault-mysql")
            .tempdir()
            .unwrap();
        let dir = tmp.path().join("server");
        let printed = mysql_sh(&["start", dir.to_str().unwrap()]);
        let url = printed
            .trim()
            .strip_prefix("export TASKBROKER_TEST_MYSQL_URL=")
            .expect("mysql.sh prints the URL")
            .to_string();
        OwnServer {
            dir,
            url,
            _tmp: tmp,
        }
    }

    fn sh(&self, cmd: &str) {
        mysql_sh(&[cmd, self.dir.to_str().unwrap()]);
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.sh("stop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mysql_server_killed_mid_flight_and_restarted_is_survived() {
    if mysql_admin_url().is_none() {
        return; // no MariaDB here (the test starts a server of its own)
    }
    let db = tokio::task::spawn_blocking(OwnServer::start).await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    let broker = Broker::start("broker", logs.path(), &db.url, &[]).await;
    let urls = vec![broker.url()];
    let ledger = Arc::new(Ledger::default());
    let stop = CancellationToken::new();
    let workers = spawn_workers(3, &urls, "mykill", WorkerPlan::default(), &ledger, &stop);
    let producer = tokio::spawn(produce(
        urls.clone(),
        "mykill".into(),
        1500,
        20,
        ledger.clone(),
        Instant::now() + Duration::from_secs(150),
        retry(),
    ));
    until_progress(&ledger, 300, "load before the kill").await;
    let db = tokio::task::spawn_blocking(move || {
        db.sh("kill9");
        db
    })
    .await
    .unwrap();
    // While the server is down, calls answer UNAVAILABLE: no hang, no INTERNAL
    // (the channel's 20 s timeout would answer CANCELLED). Each probe queues
    // behind the producer's Submits, whose inserts fail first.
    let mut c = BrokerServiceClient::new(channel(&broker.url()));
    for _ in 0..3 {
        let err = c
            .submit(pb::SubmitRequest {
                tasks: vec![spec("mykill-probe")],
            })
            .await
            .expect_err("no database, no submit");
        assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let db = tokio::task::spawn_blocking(move || {
        db.sh("resume");
        db
    })
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_secs(150), producer)
        .await
        .expect("the producer finishes")
        .expect("the producer did not panic");
    settle_and_check(
        &broker.url(),
        &db.url,
        "mykill",
        &ledger,
        Duration::from_secs(120),
    )
    .await;
    stop_workers(stop, workers).await;
    drop(broker);
    tokio::task::spawn_blocking(move || drop(db)).await.unwrap();
}
