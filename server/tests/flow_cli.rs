//! Flow through the CLI: `taskbroker cancel --filter ...` and
//! `taskbroker requeue --queue q --state cancelled --dry-run`.

mod common;

use std::process::Output;
use std::time::Duration;

use common::{Backend, TestApp, spawn_app};
use taskbroker_client::{Client, TaskState};
use tokio::process::Command;

/// Runs `taskbroker ARGS --addr URL` and returns its output.
async fn taskbroker(app: &TestApp, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_taskbroker"))
        .args(args)
        .args(["--addr", &app.url()])
        .env_remove("TASKBROKER_ADDR")
        .output()
        .await
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// Runs a command that must succeed and returns its standard output.
async fn ok(app: &TestApp, args: &[&str]) -> String {
    let o = taskbroker(app, args).await;
    assert!(
        o.status.success(),
        "taskbroker {args:?} failed: {}",
        stderr(&o)
    );
    stdout(&o)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_cancel_and_requeue_through_the_cli() {
    let Some(app) = spawn_app(Backend::Sqlite).await else {
        return;
    };
    let c = Client::connect(app.url()).await.unwrap();
    for key in ["eu-1", "eu-2", "us-1"] {
        c.submit(taskbroker_client::TaskSpec::new("bulk", b"x".to_vec()).key(key))
            .await
            .unwrap();
    }
    let dry = ok(
        &app,
        &[
            "cancel",
            "--filter",
            "queue=bulk,key-prefix=eu-",
            "--dry-run",
        ],
    )
    .await;
    assert!(dry.starts_with("would cancel 2 tasks"), "{dry}");
    let done = ok(&app, &["cancel", "--filter", "queue=bulk,key-prefix=eu-"]).await;
    assert!(done.starts_with("cancelled 2,"), "{done}");
    let dry = ok(
        &app,
        &[
            "requeue",
            "--queue",
            "bulk",
            "--state",
            "cancelled",
            "--dry-run",
        ],
    )
    .await;
    assert!(dry.starts_with("would requeue 2 tasks"), "{dry}");
    let done = ok(
        &app,
        &[
            "requeue",
            "--queue",
            "bulk",
            "--state",
            "cancelled",
            "--rate",
            "100",
        ],
    )
    .await;
    assert!(done.starts_with("requeued 2 of 2"), "{done}");
    let bad = taskbroker(&app, &["cancel", "--filter", "colour=red"]).await;
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("unknown key"), "{}", stderr(&bad));
    let page = c
        .list_tasks_page(&taskbroker_client::TaskFilter::default(), "")
        .await
        .unwrap();
    assert!(page.0.iter().all(|t| t.state() != TaskState::Cancelled));
}

/// RetryPolicy.schedule reads back as it was submitted: in GetTask, in
/// `taskbroker get` and in `taskbroker get --json`.
async fn a_retry_schedule_reads_back_through_get_task_and_the_cli(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let c = Client::connect(app.url()).await.unwrap();
    let schedule = [Duration::from_secs(1), Duration::from_secs(2)];
    let id = c
        .submit(taskbroker_client::TaskSpec::new("sched", b"x".to_vec()).retry_schedule(schedule))
        .await
        .unwrap()
        .task_id;
    let plain = c
        .submit(taskbroker_client::TaskSpec::new("sched", b"y".to_vec()))
        .await
        .unwrap()
        .task_id;
    let t = c.get_task(&id).await.unwrap();
    let got: Vec<Duration> = t
        .retry
        .unwrap()
        .schedule
        .iter()
        .map(|d| Duration::new(d.seconds as u64, d.nanos as u32))
        .collect();
    assert_eq!(got, schedule);
    let none = c.get_task(&plain).await.unwrap();
    assert!(none.retry.unwrap().schedule.is_empty());

    let detail = ok(&app, &["get", &id]).await;
    let line = detail
        .lines()
        .find(|l| l.starts_with("retry schedule"))
        .unwrap_or_else(|| panic!("no retry schedule line in:\n{detail}"));
    assert_eq!(line.split_whitespace().last(), Some("1s,2s"), "{detail}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&app, &["get", &id, "--json"]).await).unwrap();
    assert_eq!(
        json["retry"]["schedule_secs"],
        serde_json::json!([1.0, 2.0])
    );
    let detail = ok(&app, &["get", &plain]).await;
    assert!(!detail.contains("retry schedule"), "{detail}");
    app.shutdown().await;
}

all_backends!(a_retry_schedule_reads_back_through_get_task_and_the_cli);
