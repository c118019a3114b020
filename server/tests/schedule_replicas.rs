//! Exactly once with real broker processes: schedules firing every second while
//! two brokers share one Postgres (or MySQL) and the firing broker is killed with SIGKILL
//! (and restarted), or while the one SQLite broker is killed and restarted.
//! Every fire time makes one task, and CATCH_UP leaves no fire time out.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::*;
use taskbroker_client::pb;
use taskbroker_client::pb::admin_service_client::AdminServiceClient;
use taskbroker_client::pb::schedule_service_client::ScheduleServiceClient;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tonic::transport::Channel;

struct BrokerProcess {
    child: Child,
    addr: String,
}

async fn start_broker(database_url: &str) -> BrokerProcess {
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
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start taskbroker");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Some(addr) = line.strip_prefix("taskbroker listening on ") {
            let addr = format!("http://{addr}");
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return BrokerProcess { child, addr };
        }
    }
    panic!("taskbroker exited before listening");
}

async fn kill_9(mut b: BrokerProcess) {
    b.child.start_kill().unwrap(); // SIGKILL
    b.child.wait().await.unwrap();
}

const SCHEDULES: usize = 8;

fn ids() -> Vec<String> {
    (0..SCHEDULES).map(|i| format!("tick-{i}")).collect()
}

async fn schedules(addr: &str) -> ScheduleServiceClient<Channel> {
    ScheduleServiceClient::connect(addr.to_string())
        .await
        .unwrap()
}

async fn create_all(addr: &str) {
    let mut c = schedules(addr).await;
    for id in ids() {
        let s = pb::Schedule {
            schedule_id: id.clone(),
            spec: Some(pb::ScheduleSpec {
                kind: Some(pb::schedule_spec::Kind::Every(prost_types::Duration {
                    seconds: 1,
                    nanos: 0,
                })),
                ..Default::default()
            }),
            task: Some(pb::TaskTemplate {
                queue: "ticks".into(),
                ..Default::default()
            }),
            overlap: pb::OverlapPolicy::Allow as i32,
            misfire: pb::MisfirePolicy::CatchUp as i32,
            ..Default::default()
        };
        c.create_schedule(pb::CreateScheduleRequest { schedule: Some(s) })
            .await
            .unwrap();
    }
}

/// Runs of every schedule, as the broker at `addr` reports them.
async fn runs(addr: &str) -> HashMap<String, u64> {
    let mut c = schedules(addr).await;
    let list = c
        .list_schedules(pb::ListSchedulesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .schedules;
    list.into_iter().map(|s| (s.schedule_id, s.runs)).collect()
}

/// Waits (polling the broker) until every schedule has run `more` more times.
async fn until_more_runs(addr: &str, more: u64) {
    let start = runs(addr).await;
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let now = runs(addr).await;
            if ids().iter().all(|id| now[id] >= start[id] + more) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("schedules kept firing");
}

/// Pauses every schedule, then checks each one's tasks: one per fire time, one
/// second apart without a gap, as many as its runs and its run history.
async fn pause_and_check(addr: &str) {
    let mut c = schedules(addr).await;
    for id in ids() {
        c.pause_schedule(pb::PauseScheduleRequest {
            schedule_id: id.clone(),
        })
        .await
        .unwrap();
    }
    let mut admin = AdminServiceClient::connect(addr.to_string()).await.unwrap();
    for id in ids() {
        let tasks = admin
            .list_tasks(pb::ListTasksRequest {
                schedule_id: id.clone(),
                page_size: 1000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .tasks;
        let mut times: Vec<DateTime<Utc>> = tasks.iter().map(|t| from_ts(&t.fire_time)).collect();
        times.sort();
        for pair in times.windows(2) {
            assert_eq!(
                pair[1] - pair[0],
                chrono::Duration::seconds(1),
                "{id}: fire times one second apart, none twice, none left out: {times:?}"
            );
        }
        let s = c
            .get_schedule(pb::GetScheduleRequest {
                schedule_id: id.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .schedule
            .unwrap();
        assert_eq!(s.runs as usize, tasks.len(), "{id}");
        let history = c
            .list_schedule_runs(pb::ListScheduleRunsRequest {
                schedule_id: id.clone(),
                page_size: 1000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .runs;
        assert_eq!(history.len(), tasks.len(), "{id}");
        assert!(tasks.len() >= 6, "{id} fired {} times", tasks.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_postgres_brokers_and_a_kill_9_fire_each_fire_time_once() {
    two_brokers_and_a_kill_9(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_mysql_brokers_and_a_kill_9_fire_each_fire_time_once() {
    two_brokers_and_a_kill_9(Backend::Mysql).await;
}

async fn two_brokers_and_a_kill_9(backend: Backend) {
    let Some(db) = test_db(backend).await else {
        return;
    };
    let a = start_broker(&db.url).await;
    let b = start_broker(&db.url).await;
    create_all(&a.addr).await;
    until_more_runs(&b.addr, 2).await;
    // Both race on every fire time; then the one that created them dies mid-stream.
    kill_9(a).await;
    until_more_runs(&b.addr, 2).await;
    let a = start_broker(&db.url).await;
    until_more_runs(&a.addr, 2).await;
    pause_and_check(&b.addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_sqlite_broker_fires_each_fire_time_once_after_restart() {
    let db = test_db(Backend::Sqlite).await.unwrap();
    let a = start_broker(&db.url).await;
    create_all(&a.addr).await;
    until_more_runs(&a.addr, 3).await;
    kill_9(a).await;
    let a = start_broker(&db.url).await;
    until_more_runs(&a.addr, 3).await;
    pause_and_check(&a.addr).await;
}
