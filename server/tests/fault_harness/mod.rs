//! The harness of the fault tests (`tests/faults_*.rs`): real broker processes of
//! the built binary (killed with SIGKILL and restarted on the same port), producers
//! that retry every batch under its idempotency keys until it is acknowledged,
//! workers that lease and complete through whichever replica answers, a ledger of
//! what the broker acknowledged, and the checks every fault test ends with:
//! - no acknowledged submit lost,
//! - no task completed twice (one Complete answered OK per task across lease
//!   tokens, and at most one succeeded attempt per task in the database),
//! - every task ends in a final state,
//! - the broker recovers by itself (the checks are reached with no help but a
//!   restart of the killed process, as a supervisor would do).
//!
//! Every loop is bounded by a deadline; each broker's stderr goes to a file that
//! is printed when a test fails; each broker's stdout is read until it exits.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use taskbroker_client::pb;
use taskbroker_client::pb::admin_service_client::AdminServiceClient;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

// Workers that lease and settle through whichever replica answers.
mod workers;
// Not every fault test runs workers.
#[allow(unused_imports)]
pub use workers::*;

/// A port free now on 127.0.0.1 (kept by the broker across restarts).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// One broker process of the built binary.
pub struct Broker {
    child: Option<Child>,
    pub port: u16,
    pub metrics_port: u16,
    args: Vec<String>,
    /// stderr of every run of this broker, appended.
    pub log: PathBuf,
    /// Runs the broker under `sh -c '<prefix> exec taskbroker ...'` (e.g. a ulimit).
    shell_prefix: Option<String>,
}

impl Broker {
    /// Starts a broker on `database_url` with the fault tests' settings and `extra` flags.
    pub async fn start(name: &str, logs: &Path, database_url: &str, extra: &[&str]) -> Broker {
        Self::start_with(name, logs, database_url, extra, None).await
    }

    pub async fn start_with(
        name: &str,
        logs: &Path,
        database_url: &str,
        extra: &[&str],
        shell_prefix: Option<String>,
    ) -> Broker {
        let (port, metrics_port) = (free_port(), free_port());
        let mut args: Vec<String> = [
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--metrics-listen",
            &format!("127.0.0.1:{metrics_port}"),
            "--database-url",
            database_url,
            "--reclaim-interval",
            "200ms",
            "--shutdown-grace",
            "2s",
            "--min-lease",
            "100ms",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut b = Broker {
            child: None,
            port,
            metrics_port,
            args,
            log: logs.join(format!("{name}.stderr")),
            shell_prefix,
        };
        b.spawn().await;
        b
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    /// (Re)starts the process on the same ports; waits until it listens.
    pub async fn spawn(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log)
                .expect("open the broker's log");
            let mut cmd = match &self.shell_prefix {
                None => {
                    let mut c = Command::new(env!("CARGO_BIN_EXE_taskbroker"));
                    c.args(&self.args);
                    c
                }
                Some(prefix) => {
                    let mut c = Command::new("sh");
                    c.arg("-c")
                        .arg(format!("{prefix} exec \"$0\" \"$@\""))
                        .arg(env!("CARGO_BIN_EXE_taskbroker"))
                        .args(&self.args);
                    c
                }
            };
            let mut child = cmd
                .stdout(Stdio::piped())
                .stderr(Stdio::from(log))
                .kill_on_drop(true)
                .spawn()
                .expect("start taskbroker");
            let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
            let listening = tokio::time::timeout(Duration::from_secs(30), async {
                while let Ok(Some(line)) = lines.next_line().await {
                    if line.starts_with("taskbroker listening on ") {
                        return true;
                    }
                }
                false
            })
            .await
            .unwrap_or(false);
            // Keep reading stdout so a late print never blocks or kills the broker.
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            if listening {
                self.child = Some(child);
                return;
            }
            let _ = child.kill().await;
            // The port may still be held for a moment after a SIGKILL: try again.
            assert!(
                Instant::now() < deadline,
                "the broker did not start; its stderr:\n{}",
                self.stderr_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGKILL, and wait for the process to be gone.
    pub async fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.start_kill().expect("SIGKILL");
            let _ = tokio::time::timeout(Duration::from_secs(10), c.wait()).await;
        }
    }

    /// The last `n` lines of the broker's stderr.
    pub fn stderr_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The broker's /metrics page.
    pub async fn metrics(&self) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", self.metrics_port)).await
        else {
            return String::new();
        };
        let req = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        if s.write_all(req).await.is_err() {
            return String::new();
        }
        let mut out = String::new();
        let _ = s.read_to_string(&mut out).await;
        out
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- stderr of the broker ({}), last lines:\n{}",
                self.log.display(),
                self.stderr_tail(60)
            );
        }
    }
}

/// A channel that reconnects by itself and never waits forever.
pub fn channel(url: &str) -> Channel {
    Endpoint::from_shared(url.to_string())
        .expect("url")
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(20))
        .connect_lazy()
}

/// What the broker acknowledged.
#[derive(Default)]
pub struct Ledger {
    /// Task ids whose Submit was answered OK.
    pub acked: Mutex<HashSet<String>>,
    /// Per task, the lease tokens whose Complete was answered OK.
    pub completed: Mutex<HashMap<String, HashSet<String>>>,
    /// Fail calls answered OK.
    pub failed: Mutex<u64>,
}

impl Ledger {
    pub fn acked(&self) -> HashSet<String> {
        self.acked.lock().unwrap().clone()
    }

    /// No task was completed under two different leases.
    pub fn assert_no_double_completion(&self) {
        let completed = self.completed.lock().unwrap();
        let twice: Vec<_> = completed.iter().filter(|(_, t)| t.len() > 1).collect();
        assert!(
            twice.is_empty(),
            "tasks completed under two leases: {twice:?}"
        );
    }
}

/// Whether a call may be retried as is (the broker or its database is away).
pub fn transient(s: &tonic::Status) -> bool {
    matches!(
        s.code(),
        Code::Unavailable
            | Code::Unknown
            | Code::Cancelled
            | Code::DeadlineExceeded
            | Code::ResourceExhausted
    ) || (s.code() == Code::Internal && s.message().contains("transport"))
}

/// Submits `n` tasks to `queue` in batches, each under idempotency keys and
/// retried (round robin over `urls`) until it is acknowledged.
pub async fn produce(
    urls: Vec<String>,
    queue: String,
    n: usize,
    batch: usize,
    ledger: Arc<Ledger>,
    deadline: Instant,
    retry: Option<pb::RetryPolicy>,
) {
    let clients: Vec<_> = urls
        .iter()
        .map(|u| BrokerServiceClient::new(channel(u)))
        .collect();
    let mut turn = 0usize;
    for b in 0..n.div_ceil(batch) {
        let tasks: Vec<pb::TaskSpec> = (b * batch..((b + 1) * batch).min(n))
            .map(|i| pb::TaskSpec {
                queue: queue.clone(),
                key: format!("{queue}-{i}"),
                payload: i.to_string().into_bytes(),
                retry: retry.clone(),
                ..Default::default()
            })
            .collect();
        loop {
            assert!(
                Instant::now() < deadline,
                "submits not acknowledged in time"
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
                    let mut acked = ledger.acked.lock().unwrap();
                    acked.extend(r.into_inner().results.into_iter().map(|r| r.task_id));
                    break;
                }
                Err(s) if transient(&s) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(s) => panic!("submit refused: {s:?}"),
            }
        }
    }
}

/// Waits (bounded) until every acknowledged task of `queue` has succeeded, then
/// checks the ledger and the database: nothing lost, nothing completed twice,
/// nothing left unfinished.
pub async fn settle_and_check(
    admin_url: &str,
    database_url: &str,
    queue: &str,
    ledger: &Ledger,
    within: Duration,
) {
    let acked = ledger.acked();
    let mut admin = AdminServiceClient::new(channel(admin_url));
    let deadline = Instant::now() + within;
    let mut last = None;
    loop {
        match admin
            .get_queue_stats(pb::GetQueueStatsRequest {
                queues: vec![queue.to_string()],
            })
            .await
        {
            Ok(r) => {
                let s = r.into_inner().queues.into_iter().next().unwrap_or_default();
                if s.succeeded as usize == acked.len()
                    && s.ready + s.leased + s.scheduled + s.dead + s.cancelled == 0
                {
                    break;
                }
                last = Some(s);
            }
            Err(s) if transient(&s) => {}
            Err(s) => panic!("queue stats refused: {s:?}"),
        }
        assert!(
            Instant::now() < deadline,
            "not every acknowledged task succeeded in time ({} acknowledged); last stats: {last:?}",
            acked.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Every acknowledged id is there and SUCCEEDED (stats count; ids prove it).
    let stored = succeeded_ids(database_url, queue).await;
    let missing: Vec<_> = acked.difference(&stored).take(5).collect();
    assert!(
        missing.is_empty(),
        "acknowledged but not succeeded: {missing:?}"
    );
    ledger.assert_no_double_completion();
    let twice = succeeded_attempts_twice(database_url).await;
    assert!(
        twice.is_empty(),
        "tasks with two succeeded attempts: {twice:?}"
    );
}

/// Ids of the succeeded tasks of `queue`, read from the database.
pub async fn succeeded_ids(database_url: &str, queue: &str) -> HashSet<String> {
    let sql = "SELECT id FROM tasks WHERE queue = $1 AND state = 'succeeded'";
    if database_url.starts_with("mysql") {
        let mut c = <sqlx::MySqlConnection as sqlx::Connection>::connect(database_url)
            .await
            .expect("connect");
        sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql.replace("$1", "?")))
            .bind(queue)
            .fetch_all(&mut c)
            .await
            .expect("read ids")
            .into_iter()
            .collect()
    } else if database_url.starts_with("postgres") {
        let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(database_url)
            .await
            .expect("connect");
        sqlx::query_scalar::<_, String>(sql)
            .bind(queue)
            .fetch_all(&mut c)
            .await
            .expect("read ids")
            .into_iter()
            .collect()
    } else {
        let c = sqlite(database_url);
        let mut st = c.prepare(&sql.replace("$1", "?1")).expect("prepare");
        st.query_map([queue], |r| r.get::<_, String>(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("read ids")
    }
}

/// Tasks with more than one succeeded attempt.
pub async fn succeeded_attempts_twice(database_url: &str) -> Vec<String> {
    let sql = "SELECT task_id FROM task_attempts_all WHERE outcome = 'succeeded' \
               GROUP BY task_id HAVING count(*) > 1";
    if database_url.starts_with("mysql") {
        let mut c = <sqlx::MySqlConnection as sqlx::Connection>::connect(database_url)
            .await
            .expect("connect");
        sqlx::query_scalar::<_, String>(sql)
            .fetch_all(&mut c)
            .await
            .expect("read attempts")
    } else if database_url.starts_with("postgres") {
        let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(database_url)
            .await
            .expect("connect");
        sqlx::query_scalar::<_, String>(sql)
            .fetch_all(&mut c)
            .await
            .expect("read attempts")
    } else {
        let c = sqlite(database_url);
        let mut st = c.prepare(sql).expect("prepare");
        st.query_map([], |r| r.get::<_, String>(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("read attempts")
    }
}

/// A read connection to the SQLite file of a `sqlite://PATH` URL.
pub fn sqlite(database_url: &str) -> rusqlite::Connection {
    let path = database_url
        .strip_prefix("sqlite://")
        .expect("a sqlite:// url");
    let c = rusqlite::Connection::open(path).expect("open the database file");
    c.busy_timeout(Duration::from_secs(10))
        .expect("busy timeout");
    c
}

/// Waits until `f` is true, checking every 50 ms; panics with `what` after `within`.
pub async fn wait_until<F, Fut>(what: &str, within: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
