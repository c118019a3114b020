//! Exclusivity under load: many workers (and, on Postgres, several broker
//! processes sharing one database) drain a backlog with every task completed once.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use taskbroker_client::pb;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const TASKS: usize = 2000;
const WORKERS: usize = 8;

async fn submit_backlog(addr: &str, queue: &str) {
    let mut c = BrokerServiceClient::connect(addr.to_string())
        .await
        .unwrap();
    for chunk in 0..TASKS / 100 {
        let tasks = (0..100)
            .map(|i| pb::TaskSpec {
                payload: format!("{}", chunk * 100 + i).into_bytes(),
                priority: (i % 3) as i32,
                ..spec(queue)
            })
            .collect();
        submit(&mut c, tasks).await;
    }
}

/// Runs `WORKERS` workers spread over `addrs` until every task is completed, and
/// returns how many times each task was handed out.
async fn drain(addrs: Vec<String>, queue: &str) -> HashMap<String, usize> {
    let seen: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let completed = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let addr = addrs[w % addrs.len()].clone();
        let (seen, completed, queue) = (seen.clone(), completed.clone(), queue.to_string());
        workers.push(tokio::spawn(async move {
            let mut c = BrokerServiceClient::connect(addr).await.unwrap();
            while completed.load(Ordering::SeqCst) < TASKS {
                let tasks = c
                    .lease(pb::LeaseRequest {
                        labels: Default::default(),
                        worker_id: format!("w{w}"),
                        queues: vec![queue.clone()],
                        max_tasks: 1 + (w as u32 % 4) * 5,
                        lease_duration: secs(60),
                        wait: dur(std::time::Duration::from_millis(200)),
                    })
                    .await
                    .unwrap()
                    .into_inner()
                    .tasks;
                for t in tasks {
                    *seen.lock().unwrap().entry(t.task_id.clone()).or_default() += 1;
                    c.complete(pb::CompleteRequest {
                        task_id: t.task_id,
                        lease_token: t.lease_token,
                        result: vec![],
                        lease_next: None,
                    })
                    .await
                    .unwrap();
                    completed.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    // Bounded: a lost task must fail the test, not hang the suite.
    for w in workers {
        tokio::time::timeout(std::time::Duration::from_secs(300), w)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "workers still running after 300 s: {} of {TASKS} completed",
                    completed.load(Ordering::SeqCst)
                )
            })
            .unwrap();
    }
    Arc::try_unwrap(seen).unwrap().into_inner().unwrap()
}

fn assert_each_once(seen: &HashMap<String, usize>) {
    assert_eq!(seen.len(), TASKS, "every task was leased");
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "tasks leased more than once: {twice:?}");
}

async fn eight_workers_complete_two_thousand_tasks_exactly_once(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    submit_backlog(&app.url(), "drain").await;
    let seen = drain(vec![app.url()], "drain").await;
    assert_each_once(&seen);
    let stats = app
        .admin()
        .await
        .get_queue_stats(pb::GetQueueStatsRequest {
            queues: vec!["drain".into()],
        })
        .await
        .unwrap()
        .into_inner()
        .queues;
    assert_eq!(stats[0].succeeded, TASKS as u64);
    assert_eq!(stats[0].ready + stats[0].leased, 0);
}

all_backends!(eight_workers_complete_two_thousand_tasks_exactly_once);

/// A broker process of the built binary.
pub struct BrokerProcess {
    pub child: Child,
    pub addr: String,
    /// The broker's stderr (its log), kept for diagnosis.
    pub log: tempfile::NamedTempFile,
}

pub async fn start_broker(database_url: &str) -> BrokerProcess {
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_taskbroker"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--database-url",
            database_url,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(log.reopen().unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("start taskbroker");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Some(addr) = line.strip_prefix("taskbroker listening on ") {
            let addr = format!("http://{addr}");
            // Keep reading stdout so the broker never blocks on a full pipe.
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return BrokerProcess { child, addr, log };
        }
    }
    panic!(
        "taskbroker exited before listening; its log:\n{}",
        std::fs::read_to_string(log.path()).unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_broker_processes_on_one_postgres_never_lease_a_task_twice() {
    let Some(db) = test_db(Backend::Postgres).await else {
        return;
    };
    let a = start_broker(&db.url).await;
    let b = start_broker(&db.url).await;
    submit_backlog(&a.addr, "shared").await;
    let seen = drain(vec![a.addr.clone(), b.addr.clone()], "shared").await;
    assert_each_once(&seen);
}

/// Kill -9 the broker after acknowledged submits; every acknowledged task is there
/// after a restart on the same database.
async fn acknowledged_submits_survive_kill_9(b: Backend) {
    let Some(db) = test_db(b).await else { return };
    let mut broker = start_broker(&db.url).await;
    let mut c = BrokerServiceClient::connect(broker.addr.clone())
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..50 {
        let tasks = (0..4)
            .map(|j| pb::TaskSpec {
                payload: format!("{i}-{j}").into_bytes(),
                ..spec("durable")
            })
            .collect();
        ids.extend(submit(&mut c, tasks).await);
    }
    broker.child.start_kill().unwrap(); // SIGKILL
    broker.child.wait().await.unwrap();

    let broker = start_broker(&db.url).await;
    let mut admin =
        taskbroker_client::pb::admin_service_client::AdminServiceClient::connect(broker.addr)
            .await
            .unwrap();
    for id in &ids {
        let t = get(&mut admin, id).await;
        assert_eq!(state(&t), pb::TaskState::Ready);
    }
    assert_eq!(ids.len(), 200);
}

mod kill {
    use super::*;
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_acknowledged_submits_survive_kill_9() {
        acknowledged_submits_survive_kill_9(Backend::Sqlite).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_acknowledged_submits_survive_kill_9() {
        acknowledged_submits_survive_kill_9(Backend::Postgres).await
    }
}
