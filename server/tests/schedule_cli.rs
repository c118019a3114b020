//! `taskbroker schedule ...` of the real binary against a spawned broker.

mod common;

use std::process::Output;

use common::{Backend, TestApp, spawn_app};
use tokio::process::Command;

async fn taskbroker(app: &TestApp, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_taskbroker"))
        .args(args)
        .args(["--addr", &app.url()])
        .env_remove("TASKBROKER_ADDR")
        .output()
        .await
        .expect("the binary runs")
}

async fn ok(app: &TestApp, args: &[&str]) -> String {
    let o = taskbroker(app, args).await;
    assert!(
        o.status.success(),
        "taskbroker {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_through_the_cli() {
    let Some(app) = spawn_app(Backend::Sqlite).await else {
        return;
    };
    let out = ok(
        &app,
        &[
            "schedule",
            "create",
            "nightly",
            "--cron",
            "0 3 * * *",
            "--tz",
            "Europe/Berlin",
            "--queue",
            "reports",
            "--json",
            r#"{"kind":"daily"}"#,
        ],
    )
    .await;
    assert!(out.starts_with("created nightly; next fire "), "{out}");

    let out = ok(
        &app,
        &[
            "schedule",
            "preview",
            "--cron",
            "*/15 9-17 * * MON-FRI",
            "--tz",
            "America/New_York",
            "-n",
            "5",
        ],
    )
    .await;
    assert_eq!(out.lines().count(), 5, "{out}");
    for line in out.lines() {
        let t = chrono::DateTime::parse_from_rfc3339(line).expect("RFC 3339 times");
        assert_eq!(t.timestamp() % (15 * 60), 0, "{line}");
    }

    let out = ok(&app, &["schedule", "list"]).await;
    assert!(out.contains("nightly"), "{out}");
    assert!(out.contains("cron 0 3 * * * (Europe/Berlin)"), "{out}");
    assert!(out.contains("active"), "{out}");

    let out = ok(&app, &["schedule", "update", "nightly", "--max-runs", "3"]).await;
    assert!(out.contains("max_runs      3"), "{out}");
    ok(&app, &["schedule", "pause", "nightly"]).await;
    let json: serde_json::Value =
        serde_json::from_str(&ok(&app, &["schedule", "get", "nightly", "--json"]).await).unwrap();
    assert_eq!(json["state"], "paused");
    assert_eq!(json["queue"], "reports");

    let task_id = ok(&app, &["schedule", "trigger", "nightly"]).await;
    let task_id = task_id.trim();
    let out = ok(&app, &["get", task_id, "--json"]).await;
    let task: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(task["queue"], "reports");
    let out = ok(&app, &["schedule", "runs", "nightly"]).await;
    assert!(out.contains(task_id) && out.contains("trigger"), "{out}");
    let out = ok(&app, &["list", "--schedule", "nightly"]).await;
    assert!(out.contains(task_id), "{out}");

    let out = ok(&app, &["schedule", "resume", "nightly"]).await;
    assert!(out.starts_with("resumed nightly; next fire "), "{out}");

    // A bad cron line: one plain line naming the field and the parser's reason.
    let o = taskbroker(
        &app,
        &[
            "schedule",
            "create",
            "bad",
            "--cron",
            "0 25 * * *",
            "--queue",
            "q",
        ],
    )
    .await;
    assert!(!o.status.success());
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("INVALID_ARGUMENT") && err.contains("schedule.spec.cron"),
        "{err}"
    );

    ok(&app, &["schedule", "delete", "nightly"]).await;
    assert_eq!(ok(&app, &["schedule", "list"]).await, "no schedules\n");
}

/// The template's routing, fan-out and key flags reach the schedule, and a
/// trigger makes the copies with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_for_a_group_through_the_cli() {
    let Some(app) = spawn_app(Backend::Sqlite).await else {
        return;
    };
    ok(
        &app,
        &[
            "schedule",
            "create",
            "per-user",
            "--every",
            "1h",
            "--queue",
            "digests",
            "--target-label",
            "region=eu",
            "--fanout",
            "3",
            "--distinct-workers",
            "--concurrency-key",
            "digest",
        ],
    )
    .await;
    let json: serde_json::Value =
        serde_json::from_str(&ok(&app, &["schedule", "get", "per-user", "--json"]).await).unwrap();
    assert_eq!(json["target_labels"], "region=eu", "{json}");
    assert_eq!(json["fanout"], 3, "{json}");
    assert_eq!(json["concurrency_key"], "digest", "{json}");
    let out = ok(&app, &["schedule", "trigger", "per-user"]).await;
    let first = out.split_whitespace().next().expect("a task id");
    let task: serde_json::Value =
        serde_json::from_str(&ok(&app, &["get", first, "--json"]).await).unwrap();
    assert_eq!(task["concurrency_key"], "digest", "{task}");
    let copies = ok(&app, &["list", "--schedule", "per-user"]).await;
    assert_eq!(
        copies.lines().filter(|l| l.contains("digests")).count(),
        3,
        "{copies}"
    );

    ok(
        &app,
        &[
            "schedule",
            "create",
            "report",
            "--every",
            "1h",
            "--queue",
            "reports",
            "--key",
            "report-{schedule_id}-{fire_time}",
        ],
    )
    .await;
    let json: serde_json::Value =
        serde_json::from_str(&ok(&app, &["schedule", "get", "report", "--json"]).await).unwrap();
    assert_eq!(json["key"], "report-{schedule_id}-{fire_time}", "{json}");

    // A key with copies is refused by the broker: one plain line naming the field.
    let o = taskbroker(
        &app,
        &[
            "schedule",
            "create",
            "bad",
            "--every",
            "1h",
            "--queue",
            "q",
            "--fanout",
            "2",
            "--key",
            "k-{fire_time}",
        ],
    )
    .await;
    assert!(!o.status.success());
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("schedule.task.key"), "{err}");
}
