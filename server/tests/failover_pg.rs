//! Postgres failover under load, with real processes on loopback: a primary and a
//! synchronous standby (streaming replication from `pg_basebackup -R`), two broker
//! replicas on the multi-host URL `postgres://...@A,B/...?target_session_attrs=read-write`,
//! a producer and workers running; then, round after round, the primary is killed
//! with SIGKILL and the standby promoted, and the dead node comes back as the new
//! standby. Two ways: `pg_ctl promote` and a new standby from `pg_basebackup -R`
//! (scripts/pg.sh), and pg_auto_failover, whose monitor promotes the standby and
//! whose keeper rejoins the dead node (scripts/pgaf.sh; skipped when `pg_autoctl`
//! cannot be installed, unless `TASKBROKER_REQUIRE_PG_AUTO_FAILOVER` is set). Each round
//! checks that a Submit sent right after the kill answers at once, UNAVAILABLE or (when
//! it raced the kill) OK, and that an acknowledged one is there after the failover; that
//! calls answer UNAVAILABLE while no host is primary (no hang); that /readyz says not
//! ready then ready again; and measures the unavailability window (the kill to the first
//! Submit answered OK after it). At the end: every acknowledged Submit is present and SUCCEEDED, no
//! task was completed under two leases nor has two succeeded attempts, and every
//! task finished (leases taken before a failover were honoured or reclaimed).
//!
//! It runs when `TASKBROKER_FAILOVER_ROUNDS` says how many failovers to make:
//! scripts/test.sh asks for 2, scripts/failover.sh for 10.

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

const QUEUE: &str = "failover";

fn pg_sh(args: &[&str]) -> String {
    script("pg.sh", args)
}

fn script(name: &str, args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(name);
    let out = std::process::Command::new(script)
        .args(args)
        .output()
        .expect("run scripts/pg.sh");
    assert!(
        out.status.success(),
        "scripts/{name} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A primary and a synchronous standby, and what a failover does to them.
trait Ha: Send + 'static {
    /// How the standby is promoted, for the report.
    fn method(&self) -> &'static str;
    /// Both hosts, with `target_session_attrs=read-write`.
    fn multi_url(&self) -> String;
    /// The primary alone.
    fn primary_url(&self) -> String;
    /// The primary's node dies (SIGKILL to every process).
    fn kill_primary(&mut self);
    /// Whether the standby is promoted without `promote` (by a monitor): then a
    /// host may take writes again at any moment after the kill.
    fn promotes_itself(&self) -> bool;
    /// Returns once the standby is the primary.
    fn promote(&mut self);
    /// The dead node comes back as the synchronous standby.
    fn replace_dead(&mut self);
}

fn multi_url(ports: [String; 2]) -> String {
    format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        ports[0], ports[1]
    )
}

/// Two nodes, one primary and one synchronous standby, each in a directory of
/// its own that keeps its port when its node is rebuilt.
struct Pair {
    slots: [PathBuf; 2],
    primary: usize,
    _tmp: tempfile::TempDir,
}

impl Pair {
    fn start() -> Pair {
        let tmp = tempfile::Builder::new()
            .prefix("taskbroker-failover")
            .tempdir()
            .unwrap();
        let slots = [tmp.path().join("a"), tmp.path().join("b")];
        pg_sh(&["start", slots[0].to_str().unwrap()]);
        let pair = Pair {
            slots,
            primary: 0,
            _tmp: tmp,
        };
        pair.rebuild_standby();
        pair
    }

    fn dir(&self, i: usize) -> &str {
        self.slots[i].to_str().unwrap()
    }

    fn port(&self, i: usize) -> String {
        std::fs::read_to_string(self.slots[i].join("port"))
            .unwrap()
            .trim()
            .to_string()
    }

    /// A fresh standby of the primary in the other slot, then synchronous
    /// replication on; returns once the standby is the synchronous one.
    fn rebuild_standby(&self) {
        let standby = 1 - self.primary;
        pg_sh(&["standby", self.dir(self.primary), self.dir(standby)]);
        pg_sh(&["sync", self.dir(self.primary), "on"]);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let n = pg_sh(&[
                "sql",
                self.dir(self.primary),
                "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
            ]);
            if n.trim() == "1" {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the standby never became synchronous"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Ha for Pair {
    fn method(&self) -> &'static str {
        "pg_ctl promote"
    }

    fn multi_url(&self) -> String {
        multi_url([self.port(0), self.port(1)])
    }

    fn primary_url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            self.port(self.primary)
        )
    }

    fn kill_primary(&mut self) {
        pg_sh(&["kill9", self.dir(self.primary)]);
    }

    fn promotes_itself(&self) -> bool {
        false
    }

    /// Until a new standby joins, the promoted node commits alone.
    fn promote(&mut self) {
        let standby = 1 - self.primary;
        pg_sh(&["promote", self.dir(standby)]);
        pg_sh(&["sync", self.dir(standby), "off"]);
        self.primary = standby;
    }

    fn replace_dead(&mut self) {
        self.rebuild_standby();
    }
}

/// A pg_auto_failover formation: a monitor and two nodes (scripts/pgaf.sh).
struct Formation {
    dir: PathBuf,
    ports: [String; 2],
    /// 1 or 2, as the monitor names the nodes.
    primary: usize,
    _tmp: tempfile::TempDir,
}

impl Formation {
    /// None when pg_auto_failover cannot run here.
    fn start() -> Option<Formation> {
        let tmp = tempfile::Builder::new()
            .prefix("taskbroker-pgaf")
            .tempdir()
            .unwrap();
        let dir = tmp.path().join("formation");
        let script_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/pgaf.sh");
        let out = std::process::Command::new(&script_path)
            .args(["up", dir.to_str().unwrap()])
            .output()
            .expect("run scripts/pgaf.sh");
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr);
            assert!(
                std::env::var("TASKBROKER_REQUIRE_PG_AUTO_FAILOVER").is_err(),
                "pg_auto_failover is required but did not start: {why}"
            );
            eprintln!("skipped: pg_auto_failover did not start here: {why}");
            let _ = std::process::Command::new(&script_path)
                .args(["down", dir.to_str().unwrap()])
                .status();
            return None;
        }
        let printed = String::from_utf8_lossy(&out.stdout);
        let ports: Vec<String> = printed.split_whitespace().map(str::to_string).collect();
        let mut f = Formation {
            dir,
            ports: [ports[0].clone(), ports[1].clone()],
            primary: 0,
            _tmp: tmp,
        };
        f.primary = f.monitor_primary().expect("a primary after up");
        Some(f)
    }

    fn d(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    fn monitor_primary(&self) -> Option<usize> {
        script("pgaf.sh", &["primary", self.d()])
            .trim()
            .parse()
            .ok()
    }
}

impl Ha for Formation {
    fn method(&self) -> &'static str {
        "pg_auto_failover"
    }

    fn multi_url(&self) -> String {
        multi_url(self.ports.clone())
    }

    fn primary_url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            self.ports[self.primary - 1]
        )
    }

    fn kill_primary(&mut self) {
        script("pgaf.sh", &["kill", self.d(), &self.primary.to_string()]);
    }

    fn promotes_itself(&self) -> bool {
        true
    }

    /// The monitor notices the dead primary and promotes the standby.
    fn promote(&mut self) {
        let dead = self.primary;
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(p) = self.monitor_primary().filter(|p| *p != dead) {
                self.primary = p;
                return;
            }
            assert!(
                Instant::now() < deadline,
                "pg_auto_failover never promoted the standby"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn replace_dead(&mut self) {
        let dead = 3 - self.primary;
        script("pgaf.sh", &["rejoin", self.d(), &dead.to_string()]);
    }
}

impl Drop for Formation {
    fn drop(&mut self) {
        script("pgaf.sh", &["down", self.d()]);
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for i in 0..2 {
            pg_sh(&["stop", self.dir(i)]);
        }
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

async fn until_ready(brokers: &[Broker], want: u16, what: &str) {
    for b in brokers {
        let port = b.metrics_port;
        wait_until(what, Duration::from_secs(60), || async move {
            readyz(port).await == Some(want)
        })
        .await;
    }
}

/// The status code of /readyz on a broker's metrics port.
async fn readyz(port: u16) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    out.split_whitespace().nth(1)?.parse().ok()
}

/// Submits batches under idempotency keys until `stop`, each retried until it is
/// acknowledged; keeps at most `backlog` acknowledged tasks not yet completed.
async fn produce_until(
    urls: Vec<String>,
    batch: usize,
    backlog: usize,
    ledger: Arc<Ledger>,
    stop: CancellationToken,
) {
    let clients: Vec<_> = urls
        .iter()
        .map(|u| BrokerServiceClient::new(channel(u)))
        .collect();
    let (mut turn, mut next) = (0usize, 0usize);
    while !stop.is_cancelled() {
        if ledger.acked.lock().unwrap().len() > ledger.completed.lock().unwrap().len() + backlog {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let tasks: Vec<pb::TaskSpec> = (next..next + batch)
            .map(|i| pb::TaskSpec {
                queue: QUEUE.into(),
                key: format!("{QUEUE}-{i}"),
                payload: i.to_string().into_bytes(),
                ..Default::default()
            })
            .collect();
        next += batch;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            assert!(
                Instant::now() < deadline,
                "a batch not acknowledged in time"
            );
            let mut c = clients[turn % clients.len()].clone();
            turn += 1;
            match c
                .submit(pb::SubmitRequest {
                    tasks: tasks.clone(),
                })
                .await
            {
                Ok(r) => {
                    let ids = r.into_inner().results.into_iter().map(|r| r.task_id);
                    ledger.acked.lock().unwrap().extend(ids);
                    break;
                }
                Err(s) if transient(&s) => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(s) => panic!("submit refused: {s:?}"),
            }
        }
    }
}

fn completed(l: &Ledger) -> usize {
    l.completed.lock().unwrap().len()
}

async fn until_completed(ledger: &Arc<Ledger>, by: usize, what: &str) {
    let from = completed(ledger);
    let l = ledger.clone();
    wait_until(what, Duration::from_secs(120), move || {
        let l = l.clone();
        async move { completed(&l) >= from + by }
    })
    .await;
}

/// Completions per second over `over`.
async fn throughput(ledger: &Arc<Ledger>, over: Duration) -> f64 {
    let from = completed(ledger);
    tokio::time::sleep(over).await;
    (completed(ledger) - from) as f64 / over.as_secs_f64()
}

/// How many failovers to make; None: the test does not run.
fn rounds() -> Option<usize> {
    let Ok(rounds) = std::env::var("TASKBROKER_FAILOVER_ROUNDS") else {
        eprintln!("skipped: TASKBROKER_FAILOVER_ROUNDS is not set (scripts/failover.sh)");
        return None;
    };
    let rounds: usize = rounds
        .parse()
        .expect("TASKBROKER_FAILOVER_ROUNDS is a number");
    assert!(rounds > 0, "TASKBROKER_FAILOVER_ROUNDS is at least 1");
    // No Postgres here: skipped (the test starts clusters of its own).
    postgres_admin_url().map(|_| rounds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_brokers_ride_through_pg_ctl_promotions() {
    let Some(rounds) = rounds() else { return };
    let pair = blocking(Pair::start).await;
    ride_through(Box::new(pair), rounds).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_brokers_ride_through_pg_auto_failover_failovers() {
    let Some(rounds) = rounds() else { return };
    let Some(formation) = blocking(Formation::start).await else {
        return;
    };
    ride_through(Box::new(formation), rounds).await;
}

async fn ride_through(mut pair: Box<dyn Ha>, rounds: usize) {
    let method = pair.method();
    let url = pair.multi_url();
    let logs = tempfile::tempdir().unwrap();
    let brokers = vec![
        Broker::start("broker-0", logs.path(), &url, &[]).await,
        Broker::start("broker-1", logs.path(), &url, &[]).await,
    ];
    let urls: Vec<String> = brokers.iter().map(Broker::url).collect();
    let ledger = Arc::new(Ledger::default());
    let stop = CancellationToken::new();
    let workers = spawn_workers(4, &urls, QUEUE, WorkerPlan::default(), &ledger, &stop);
    let stop_producing = CancellationToken::new();
    let producer = tokio::spawn(produce_until(
        urls.clone(),
        10,
        300,
        ledger.clone(),
        stop_producing.clone(),
    ));
    until_completed(&ledger, 200, "load before the first failover").await;
    let before = throughput(&ledger, Duration::from_secs(3)).await;

    let mut windows = Vec::with_capacity(rounds);
    let mut probe = BrokerServiceClient::new(channel(&urls[0]));
    for round in 1..=rounds {
        until_completed(&ledger, 100, &format!("load before failover {round}")).await;
        let killed = Instant::now();
        pair = blocking(move || {
            let mut pair = pair;
            pair.kill_primary();
            pair
        })
        .await;
        // A Submit right after the kill answers at once (the channel's own deadline is
        // 20 s): UNAVAILABLE, or OK when it raced the kill (a pooled backend outlives
        // its postmaster for a moment). An acknowledged commit waited for the
        // synchronous standby's flush, so it is durable there and must be found after
        // the failover; an unacknowledged one may or may not have committed. Every
        // Submit of the round carries one key, so either way it is one task: the
        // Submit that measures the window below finds the acknowledged task under
        // its id, or makes (or finds) the unacknowledged one.
        let key = format!("probe-{round}");
        let keyed = || pb::SubmitRequest {
            tasks: vec![pb::TaskSpec {
                key: key.clone(),
                ..spec(QUEUE)
            }],
        };
        let raced = match probe.submit(keyed()).await {
            Ok(r) => {
                let id = r.into_inner().results[0].task_id.clone();
                eprintln!("failover {round}: the Submit sent at the kill was acknowledged ({id})");
                ledger.acked.lock().unwrap().insert(id.clone());
                Some(id)
            }
            Err(err) => {
                assert_eq!(err.code(), Code::Unavailable, "round {round}: {err:?}");
                None
            }
        };
        until_ready(&brokers, 503, "/readyz not ready without a primary").await;
        if !pair.promotes_itself() {
            // The old primary is dead and the standby not yet promoted: no host
            // takes writes, and a call fails fast with UNAVAILABLE.
            let err = probe
                .submit(keyed())
                .await
                .expect_err("no primary, no submit");
            assert_eq!(err.code(), Code::Unavailable, "round {round}: {err:?}");
        }
        pair = blocking(move || {
            let mut pair = pair;
            pair.promote();
            pair
        })
        .await;
        // The window: from the kill to the first Submit acknowledged.
        let mut turn = 0;
        let window = loop {
            let mut c = BrokerServiceClient::new(channel(&urls[turn % urls.len()]));
            turn += 1;
            match c.submit(keyed()).await {
                Ok(r) => {
                    let at = killed.elapsed();
                    let result = &r.into_inner().results[0];
                    if let Some(acked) = &raced {
                        assert_eq!(
                            (&result.task_id, result.deduplicated),
                            (acked, true),
                            "round {round}: the task acknowledged at the kill is not there \
                             after the failover"
                        );
                    }
                    ledger.acked.lock().unwrap().insert(result.task_id.clone());
                    break at;
                }
                Err(s) if transient(&s) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(s) => panic!("round {round}: submit refused after the promotion: {s:?}"),
            }
            assert!(
                killed.elapsed() < Duration::from_secs(90),
                "round {round}: no Submit acknowledged within 90 s of the promotion"
            );
        };
        until_ready(&brokers, 200, "/readyz ready on the new primary").await;
        eprintln!(
            "failover {round} ({method}): unavailable for {:.2} s (kill to the first Submit \
             acknowledged)",
            window.as_secs_f64()
        );
        windows.push(window.as_secs_f64());
        pair = blocking(move || {
            let mut pair = pair;
            pair.replace_dead();
            pair
        })
        .await;
    }
    until_completed(&ledger, 100, "load after the last failover").await;
    let after = throughput(&ledger, Duration::from_secs(3)).await;
    stop_producing.cancel();
    tokio::time::timeout(Duration::from_secs(150), producer)
        .await
        .expect("the producer finishes")
        .expect("the producer did not panic");
    settle_and_check(
        &urls[0],
        &pair.primary_url(),
        QUEUE,
        &ledger,
        Duration::from_secs(180),
    )
    .await;
    stop_workers(stop, workers).await;
    windows.sort_by(f64::total_cmp);
    eprintln!(
        "failover summary: {rounds} failovers (kill -9, {method}), {} tasks acknowledged \
         and succeeded, none lost, none completed twice; unavailable min {:.2} s, median {:.2} s, \
         max {:.2} s; completions {before:.0}/s before, {after:.0}/s after",
        ledger.acked().len(),
        windows[0],
        windows[windows.len() / 2],
        windows[windows.len() - 1],
    );
    drop(brokers);
    blocking(move || drop(pair)).await;
}
