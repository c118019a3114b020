//! The outbox's exactly-once proof under faults: producers commit and roll back
//! transactions that write an order and its outbox rows, while two `taskbroker relay`
//! processes ship the rows and the relays and the broker are killed with SIGKILL at
//! random points (and a relay is sometimes stopped with SIGTERM, which must end it
//! cleanly) and started again, as a supervisor would. At the end every committed row
//! is exactly one task and no rolled-back row is any. The producer's database is
//! Postgres, or MySQL/MariaDB when TASKBROKER_TEST_MYSQL_URL is set (scripts/mysql.sh).
//!
//! The ground truth is the producer's database: an order row exists if and only if its
//! transaction committed, and it records how many tasks it enqueued. Payloads name
//! the order and the task (`o17-2`), so the broker's task table is compared with it.
//!
//! CI runs a short version. `scripts/outbox-kill.sh` runs a long one:
//! TASKBROKER_OUTBOX_KILL_ORDERS (orders per producer, default 120) and
//! TASKBROKER_OUTBOX_KILL_SEED (the random seed, printed at the start) size and replay it.

mod common;
mod fault_harness;
mod mysql_producer;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use fault_harness::*;
use sqlx::PgPool;
use taskbroker_client::{TaskSpec, outbox};
use tokio::process::{Child, Command};

const PRODUCERS: u64 = 4;
const QUEUE: &str = "outbox-kill";

/// A small deterministic generator (xorshift64*), so a failing run can be replayed
/// from its seed.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo))
    }
}

/// One `taskbroker relay` process, restartable.
struct RelayProcess {
    child: Option<Child>,
    /// Length of the log when the latest run started: its lines come after.
    log_start: usize,
    args: Vec<String>,
    log: PathBuf,
}

impl RelayProcess {
    fn new(name: &str, logs: &Path, source: &str, broker: &str) -> RelayProcess {
        let args = [
            "relay",
            "--source",
            source,
            "--addr",
            broker,
            "--poll-interval",
            "300ms",
            "--report-interval",
            "1s",
            "--batch-size",
            "50",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        RelayProcess {
            child: None,
            log_start: 0,
            args,
            log: logs.join(format!("{name}.stderr")),
        }
    }

    fn spawn(&mut self) {
        // The previous run has exited (kill9 and terminate wait for it): whatever the
        // log holds now is its, and the new run's lines follow.
        self.log_start = std::fs::metadata(&self.log).map_or(0, |m| m.len() as usize);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open the relay's log");
        let child = Command::new(env!("CARGO_BIN_EXE_taskbroker"))
            .args(&self.args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .expect("start taskbroker relay");
        self.child = Some(child);
    }

    /// Waits until the latest run has logged that it runs (its signal handlers are
    /// installed by then).
    async fn until_running(&self) {
        let (log, from) = (self.log.clone(), self.log_start);
        wait_until("the relay to start", Duration::from_secs(60), move || {
            let log = log.clone();
            async move {
                std::fs::read(&log)
                    .ok()
                    .and_then(|b| {
                        b.get(from..)
                            .map(|b| String::from_utf8_lossy(b).into_owned())
                    })
                    .is_some_and(|run| run.contains("outbox relay running"))
            }
        })
        .await;
    }

    async fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.start_kill().expect("SIGKILL");
            let _ = tokio::time::timeout(Duration::from_secs(10), c.wait()).await;
        }
    }

    /// SIGTERM: the relay finishes its batch and exits 0 (bounded).
    async fn terminate(&mut self) {
        if self.child.is_some() {
            self.until_running().await;
        }
        if let Some(mut c) = self.child.take() {
            let pid = c.id().expect("a running relay has a pid");
            let status = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .expect("kill -TERM");
            assert!(status.success());
            let exit = tokio::time::timeout(Duration::from_secs(30), c.wait())
                .await
                .expect("the relay stops within 30 s of SIGTERM")
                .expect("wait");
            assert!(
                exit.success(),
                "SIGTERM ends the relay cleanly, got {exit}; its log:\n{}",
                self.stderr_tail(30)
            );
        }
    }

    fn stderr_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Sum of a field over the relay's "outbox relay report" lines.
    fn reported(&self, field: &str) -> u64 {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let pat = format!("{field}=");
        text.lines()
            .filter(|l| l.contains("outbox relay report"))
            .filter_map(|l| {
                let at = l.find(&pat)? + pat.len();
                l[at..]
                    .split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- stderr of {}, last lines:\n{}",
                self.log.display(),
                self.stderr_tail(40)
            );
        }
    }
}

#[derive(Default)]
struct Outcomes {
    committed: AtomicU64,
    rolled_back: Mutex<HashSet<i64>>,
}

/// The producer's database: Postgres, or MySQL/MariaDB (TASKBROKER_TEST_MYSQL_URL).
#[derive(Clone)]
enum Producer {
    Postgres(PgPool),
    MySql(sqlx::MySqlPool),
}

impl Producer {
    /// One order with `tasks` outbox rows, committed or rolled back.
    async fn order(&self, order: i64, tasks: i64, many: bool, commit: bool) {
        let specs = (0..tasks).map(|j| TaskSpec::new(QUEUE, format!("o{order}-{j}").into_bytes()));
        match self {
            Producer::Postgres(pool) => {
                let mut tx = pool.begin().await.expect("begin");
                sqlx::query("INSERT INTO orders (id, tasks) VALUES ($1, $2)")
                    .bind(order)
                    .bind(tasks)
                    .execute(&mut *tx)
                    .await
                    .expect("insert the order");
                if many {
                    outbox::enqueue_many(&mut tx, specs).await.expect("enqueue");
                } else {
                    for s in specs {
                        outbox::enqueue(&mut tx, s).await.expect("enqueue");
                    }
                }
                if commit {
                    tx.commit().await.expect("commit");
                } else {
                    tx.rollback().await.expect("rollback");
                }
            }
            Producer::MySql(pool) => {
                let mut tx = pool.begin().await.expect("begin");
                sqlx::query("INSERT INTO orders (id, tasks) VALUES (?, ?)")
                    .bind(order)
                    .bind(tasks)
                    .execute(&mut *tx)
                    .await
                    .expect("insert the order");
                if many {
                    outbox::mysql::enqueue_many(&mut tx, specs)
                        .await
                        .expect("enqueue");
                } else {
                    for s in specs {
                        outbox::mysql::enqueue(&mut tx, s).await.expect("enqueue");
                    }
                }
                if commit {
                    tx.commit().await.expect("commit");
                } else {
                    tx.rollback().await.expect("rollback");
                }
            }
        }
    }

    async fn count(&self, sql: &'static str) -> Result<i64, sqlx::Error> {
        match self {
            Producer::Postgres(p) => sqlx::query_scalar(sql).fetch_one(p).await,
            Producer::MySql(p) => sqlx::query_scalar(sql).fetch_one(p).await,
        }
    }

    async fn orders(&self) -> Vec<(i64, i64)> {
        let sql = "SELECT id, tasks FROM orders";
        match self {
            Producer::Postgres(p) => sqlx::query_as(sql).fetch_all(p).await,
            Producer::MySql(p) => sqlx::query_as(sql).fetch_all(p).await,
        }
        .expect("read the orders")
    }
}

/// Writes orders with 1 to 5 outbox rows each; about a third of the transactions roll back.
async fn produce(db: Producer, producer: u64, orders: u64, mut rng: Rng, out: Arc<Outcomes>) {
    for n in 0..orders {
        let order = (producer * 1_000_000 + n) as i64;
        let tasks = 1 + rng.below(5) as i64;
        let many = rng.below(2) == 0;
        let commit = rng.below(3) != 0;
        db.order(order, tasks, many, commit).await;
        if commit {
            out.committed.fetch_add(1, Ordering::Relaxed);
        } else {
            out.rolled_back.lock().unwrap().insert(order);
        }
        tokio::time::sleep(rng.millis(5, 40)).await;
    }
}

/// Payload -> number of tasks with it, read from the broker's database.
async fn task_payloads(database_url: &str) -> HashMap<String, u64> {
    let rows: Vec<Vec<u8>> = if database_url.starts_with("postgres") {
        let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(database_url)
            .await
            .expect("connect");
        sqlx::query_scalar("SELECT payload FROM tasks WHERE queue = $1")
            .bind(QUEUE)
            .fetch_all(&mut c)
            .await
            .expect("read tasks")
    } else {
        let c = sqlite(database_url);
        let mut st = c
            .prepare("SELECT payload FROM tasks WHERE queue = ?1")
            .expect("prepare");
        st.query_map([QUEUE], |r| r.get::<_, Vec<u8>>(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("read tasks")
    };
    let mut counts = HashMap::new();
    for p in rows {
        *counts
            .entry(String::from_utf8_lossy(&p).into_owned())
            .or_insert(0) += 1;
    }
    counts
}

async fn every_committed_row_is_one_task_through_kills(backend: Backend, mysql: bool) {
    // The producer's database: Postgres, or a MySQL database of its own.
    let mysql_db = if mysql {
        match mysql_producer::MySqlDb::create().await {
            Some(db) => Some(db),
            None => return,
        }
    } else {
        None
    };
    let Some(broker_db) = test_db(backend).await else {
        return;
    };
    let pg_db = if mysql {
        None
    } else {
        match test_db(Backend::Postgres).await {
            Some(db) => Some(db),
            None => return,
        }
    };
    let producer_url = match (&mysql_db, &pg_db) {
        (Some(m), _) => m.url.clone(),
        (_, Some(p)) => p.url.clone(),
        _ => unreachable!("one of the two is set"),
    };
    let orders: u64 = std::env::var("TASKBROKER_OUTBOX_KILL_ORDERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    let seed: u64 = std::env::var("TASKBROKER_OUTBOX_KILL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    let source = if mysql { "MySQL" } else { "Postgres" };
    eprintln!(
        "outbox kill test: seed {seed}, {orders} orders per producer, outbox on {source}, broker on {backend:?}"
    );
    let mut rng = Rng(seed);

    let db = if mysql {
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(PRODUCERS as u32 + 2)
            .connect(&producer_url)
            .await
            .expect("connect the producer's database");
        outbox::mysql::init_schema(&pool)
            .await
            .expect("outbox schema");
        sqlx::query(
            "CREATE TABLE orders (id bigint PRIMARY KEY, tasks bigint NOT NULL) ENGINE = InnoDB",
        )
        .execute(&pool)
        .await
        .expect("orders");
        Producer::MySql(pool)
    } else {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(PRODUCERS as u32 + 2)
            .connect(&producer_url)
            .await
            .expect("connect the producer's database");
        outbox::init_schema(&pool).await.expect("outbox schema");
        sqlx::query("CREATE TABLE orders (id bigint PRIMARY KEY, tasks bigint NOT NULL)")
            .execute(&pool)
            .await
            .expect("orders");
        Producer::Postgres(pool)
    };

    let logs = tempfile::tempdir().unwrap();
    let mut broker = Broker::start("broker", logs.path(), &broker_db.url, &[]).await;
    let mut relays: Vec<RelayProcess> = ["relay-a", "relay-b"]
        .iter()
        .map(|name| RelayProcess::new(name, logs.path(), &producer_url, &broker.url()))
        .collect();
    for r in &mut relays {
        r.spawn();
    }

    let out = Arc::new(Outcomes::default());
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let mut fork = rng.clone();
            for _ in 0..=p {
                fork.next();
            }
            tokio::spawn(produce(
                db.clone(),
                p,
                orders,
                Rng(fork.next() | 1),
                out.clone(),
            ))
        })
        .collect();
    let done = Arc::new(AtomicBool::new(false));
    let watch = {
        let done = done.clone();
        let producers = producers;
        tokio::spawn(async move {
            for p in producers {
                p.await.expect("a producer did not panic");
            }
            done.store(true, Ordering::SeqCst);
        })
    };

    // Faults at random points until the producers are done (and at least a few).
    let (mut relay_kills, mut relay_terms, mut broker_kills) = (0u32, 0u32, 0u32);
    let deadline = Instant::now() + Duration::from_secs(600);
    while !done.load(Ordering::SeqCst) || relay_kills + relay_terms + broker_kills < 6 {
        assert!(
            Instant::now() < deadline,
            "the producers did not finish in time"
        );
        tokio::time::sleep(rng.millis(50, 600)).await;
        match rng.below(5) {
            0 | 1 => {
                let r = &mut relays[rng.below(2) as usize];
                r.kill9().await;
                relay_kills += 1;
                tokio::time::sleep(rng.millis(0, 300)).await;
                r.spawn();
            }
            2 => {
                let r = &mut relays[rng.below(2) as usize];
                r.terminate().await;
                relay_terms += 1;
                r.spawn();
            }
            3 => {
                broker.kill9().await;
                broker_kills += 1;
                tokio::time::sleep(rng.millis(0, 300)).await;
                broker.spawn().await;
            }
            _ => {
                // Both at once: the relay's batch and the broker's answer die together.
                let r = &mut relays[rng.below(2) as usize];
                r.kill9().await;
                broker.kill9().await;
                relay_kills += 1;
                broker_kills += 1;
                broker.spawn().await;
                r.spawn();
            }
        }
    }
    watch.await.unwrap();

    // The relays drain the table by themselves.
    let p = db.clone();
    wait_until("the outbox to drain", Duration::from_secs(120), move || {
        let p = p.clone();
        async move {
            p.count("SELECT count(*) FROM taskbroker_outbox")
                .await
                .map(|n| n == 0)
                .unwrap_or(false)
        }
    })
    .await;
    let refused = db
        .count("SELECT count(*) FROM taskbroker_outbox WHERE failed_at IS NOT NULL")
        .await
        .unwrap();
    assert_eq!(refused, 0);
    for r in &mut relays {
        r.terminate().await;
    }

    // Ground truth: the committed orders and the number of tasks each enqueued.
    let committed = db.orders().await;
    assert_eq!(
        committed.len() as u64,
        out.committed.load(Ordering::Relaxed)
    );
    let want: HashSet<String> = committed
        .iter()
        .flat_map(|(o, n)| (0..*n).map(move |j| format!("o{o}-{j}")))
        .collect();
    let got = task_payloads(&broker_db.url).await;
    let twice: Vec<_> = got.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(twice.is_empty(), "rows that became two tasks: {twice:?}");
    let missing: Vec<_> = want
        .iter()
        .filter(|p| !got.contains_key(*p))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "committed rows with no task: {missing:?}"
    );
    let rolled_back = out.rolled_back.lock().unwrap().clone();
    let stray: Vec<_> = got.keys().filter(|p| !want.contains(*p)).take(5).collect();
    assert!(stray.is_empty(), "tasks of no committed row: {stray:?}");
    let rolled_back_tasks = got
        .keys()
        .filter(|p| {
            p.strip_prefix('o')
                .and_then(|s| s.split('-').next())
                .and_then(|o| o.parse::<i64>().ok())
                .is_some_and(|o| rolled_back.contains(&o))
        })
        .count();
    assert_eq!(rolled_back_tasks, 0, "a rolled-back row became a task");

    let redelivered: u64 = relays.iter().map(|r| r.reported("deduplicated")).sum();
    eprintln!(
        "outbox kill test ({source} outbox, broker on {backend:?}): {} committed orders, {} rolled back, {} tasks, \
         {relay_kills} relay SIGKILLs, {relay_terms} relay SIGTERMs, {broker_kills} broker SIGKILLs, \
         {redelivered} rows shipped again after a kill (deduplicated by key)",
        committed.len(),
        rolled_back.len(),
        got.len(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_committed_outbox_row_is_one_task_through_kills_with_the_broker_on_sqlite() {
    every_committed_row_is_one_task_through_kills(Backend::Sqlite, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_committed_outbox_row_is_one_task_through_kills_with_the_broker_on_postgres() {
    every_committed_row_is_one_task_through_kills(Backend::Postgres, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_committed_mysql_outbox_row_is_one_task_through_kills() {
    every_committed_row_is_one_task_through_kills(Backend::Sqlite, true).await;
}
