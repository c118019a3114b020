//! The client subcommands of the real `taskbroker` binary against a spawned broker:
//! what they print, what they change, and how they fail.

mod common;

use std::process::Output;

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

/// Where a column starts: the offset of its name in the header line.
fn column(header: &str, name: &str) -> usize {
    header
        .find(name)
        .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_get_list_cancel_and_requeue_through_the_cli() {
    let Some(app) = spawn_app(Backend::Sqlite).await else {
        return;
    };
    let c = Client::connect(app.url()).await.unwrap();

    let out = ok(
        &app,
        &[
            "submit",
            "emails",
            "--payload",
            "hello",
            "--key",
            "order-42",
            "--priority",
            "-3",
        ],
    )
    .await;
    let id = out.trim().to_string();
    assert_eq!(out, format!("{id}\n"), "submit prints the id alone");
    let task = c.get_task(&id).await.unwrap();
    assert_eq!(
        (task.payload.as_slice(), task.key.as_str(), task.priority),
        (&b"hello"[..], "order-42", -3)
    );
    assert_eq!(task.state(), TaskState::Ready);

    let again = taskbroker(
        &app,
        &[
            "submit",
            "emails",
            "--payload",
            "other",
            "--key",
            "order-42",
        ],
    )
    .await;
    assert!(again.status.success());
    assert_eq!(
        stdout(&again).trim(),
        id,
        "the same key gives the same task"
    );
    assert!(stderr(&again).contains("already exists"));

    let later = ok(
        &app,
        &[
            "submit",
            "emails",
            "--json",
            r#"{"to": "ada@example.com"}"#,
            "--delay",
            "1h",
            "--max-attempts",
            "7",
            "--deadline",
            "2h",
        ],
    )
    .await;
    let later = later.trim();
    let t = c.get_task(later).await.unwrap();
    assert_eq!(t.state(), TaskState::Scheduled, "--delay postpones it");
    assert_eq!(t.payload, br#"{"to": "ada@example.com"}"#);
    assert_eq!(t.max_attempts, 7);
    assert!(t.deadline.unwrap().seconds > t.run_at.unwrap().seconds);

    let detail = ok(&app, &["get", &id]).await;
    let line = |name: &str| {
        detail
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} line in:\n{detail}"))
            .split_whitespace()
            .last()
            .unwrap()
            .to_string()
    };
    assert_eq!(line("state"), "READY");
    assert_eq!(line("payload"), "hello");
    assert_eq!(line("key"), "order-42");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&app, &["get", &id, "--json"]).await).unwrap();
    assert_eq!(json["state"], "READY");
    assert_eq!(json["payload"], "hello");

    // A readable table: every row's cells start under their header.
    let table = ok(&app, &["list", "--queue", "emails"]).await;
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    let (id_col, state_col) = (column(header, "ID"), column(header, "STATE"));
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert!(rows[0].starts_with(later), "newest first:\n{table}");
    for row in &rows {
        assert_eq!(row.find(|ch: char| !ch.is_whitespace()), Some(id_col));
        let state = row[state_col..].split_whitespace().next().unwrap();
        assert!(state == "READY" || state == "SCHEDULED", "{row}");
    }
    let scheduled: serde_json::Value = serde_json::from_str(
        &ok(
            &app,
            &[
                "list",
                "--queue",
                "emails",
                "--state",
                "scheduled",
                "--json",
            ],
        )
        .await,
    )
    .unwrap();
    let ids: Vec<&str> = scheduled
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [later]);
    let limited = ok(&app, &["list", "--limit", "1"]).await;
    assert_eq!(limited.lines().count(), 2, "header and one row:\n{limited}");
    // Filters by creation time (RFC 3339, or a duration meaning that long ago)
    // and by the worker that last leased a task.
    let recent = ok(
        &app,
        &["list", "--queue", "emails", "--created-after", "1h"],
    )
    .await;
    assert_eq!(recent.lines().count(), 3, "header and two rows:\n{recent}");
    let future = [
        "list",
        "--queue",
        "emails",
        "--created-after",
        "2999-01-01T00:00:00Z",
    ];
    assert_eq!(ok(&app, &future).await, "no tasks\n");
    let old_only = ["list", "--queue", "emails", "--created-before", "1h"];
    assert_eq!(ok(&app, &old_only).await, "no tasks\n");
    let nobody = ["list", "--queue", "emails", "--worker", "nobody"];
    assert_eq!(ok(&app, &nobody).await, "no tasks\n");
    let bad = taskbroker(&app, &["list", "--created-after", "yesterday"]).await;
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    assert_eq!(
        ok(&app, &["cancel", &id]).await,
        format!("cancelled {id}\n")
    );
    assert_eq!(c.get_task(&id).await.unwrap().state(), TaskState::Cancelled);
    assert_eq!(
        ok(&app, &["requeue", &id]).await,
        format!("requeued {id} (READY)\n")
    );
    assert_eq!(c.get_task(&id).await.unwrap().state(), TaskState::Ready);

    let attempts = ok(&app, &["attempts", &id]).await;
    assert!(attempts.starts_with("ATTEMPT"), "{attempts}");
    let stats = ok(&app, &["stats"]).await;
    let emails = stats
        .lines()
        .find(|l| l.starts_with("emails"))
        .expect("a row for the queue");
    let header = stats.lines().next().unwrap();
    let ready = emails[column(header, "READY")..]
        .split_whitespace()
        .next()
        .unwrap();
    assert_eq!(ready, "1", "{stats}");
    app.shutdown().await;
}

/// `get` of a task whose 3 attempts failed on worker w-r, then requeued: the new
/// budget and no lessee (the last one shows only while the task is finished).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_after_requeue_shows_the_new_budget_and_no_lessee() {
    use common::{lease_req, retry_now, spec, submit_one};
    use taskbroker_client::pb;
    let Some(app) = spawn_app(Backend::Sqlite).await else {
        return;
    };
    let mut c = app.broker().await;
    let id = submit_one(
        &mut c,
        pb::TaskSpec {
            retry: retry_now(3),
            ..spec("rq")
        },
    )
    .await;
    for _ in 0..3 {
        let t = c
            .lease(pb::LeaseRequest {
                worker_id: "w-r".into(),
                ..lease_req("rq", 1)
            })
            .await
            .unwrap()
            .into_inner()
            .tasks
            .remove(0);
        c.fail(pb::FailRequest {
            task_id: t.task_id,
            lease_token: t.lease_token,
            error_message: "boom".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let field = |detail: &str, name: &str| {
        detail
            .lines()
            .find(|l| l.split("  ").next() == Some(name))
            .map(|l| l[name.len()..].trim().to_string())
    };
    let dead = ok(&app, &["get", &id]).await;
    assert_eq!(field(&dead, "state").as_deref(), Some("DEAD"), "{dead}");
    assert_eq!(field(&dead, "attempt").as_deref(), Some("3 of 3"), "{dead}");
    assert_eq!(
        field(&dead, "last leased by").as_deref(),
        Some("w-r"),
        "{dead}"
    );

    ok(&app, &["requeue", &id]).await;
    let ready = ok(&app, &["get", &id]).await;
    assert_eq!(field(&ready, "state").as_deref(), Some("READY"), "{ready}");
    assert_eq!(
        field(&ready, "attempt").as_deref(),
        Some("3 of 6"),
        "{ready}"
    );
    assert!(!ready.contains("leased by"), "{ready}");
    assert!(!ready.contains("w-r"), "{ready}");
    assert!(!ready.contains("lease expires"), "{ready}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&app, &["get", &id, "--json"]).await).unwrap();
    assert_eq!(
        (json["attempt"].as_u64(), json["max_attempts"].as_u64()),
        (Some(3), Some(6))
    );
    assert_eq!(json["retry"]["max_attempts"], 3);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_errors_are_one_line_with_the_status_and_a_failing_exit() {
    let Some(app) = spawn_app(Backend::Sqlite).await else {
        return;
    };

    let missing = taskbroker(&app, &["get", "no-such-task"]).await;
    assert!(!missing.status.success());
    assert!(stdout(&missing).is_empty());
    let err = stderr(&missing);
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("taskbroker: NOT_FOUND: "), "{err:?}");
    assert!(err.contains("no-such-task"), "{err:?}");

    let bad = taskbroker(&app, &["submit", "has space", "--payload", "x"]).await;
    assert!(!bad.status.success());
    let err = stderr(&bad);
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(
        err.starts_with("taskbroker: INVALID_ARGUMENT: ") && err.contains("queue"),
        "{err:?}"
    );

    let not_json = taskbroker(&app, &["submit", "q", "--json", "{oops"]).await;
    assert!(!not_json.status.success());
    assert!(stderr(&not_json).starts_with("taskbroker: --json is not valid JSON"));

    let requeue_ready = {
        let id = ok(&app, &["submit", "q", "--payload", "x"]).await;
        taskbroker(&app, &["requeue", id.trim()]).await
    };
    assert!(!requeue_ready.status.success());
    assert!(stderr(&requeue_ready).starts_with("taskbroker: FAILED_PRECONDITION: "));
    app.shutdown().await;
}

/// Routing: `submit --target-label`, `--copies`, a Rust worker with
/// `.label(...)` running the targeted task, and `taskbroker workers`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targeted_tasks_copies_and_workers_through_the_cli() {
    use taskbroker_client::worker::{Outcome, WorkerEvent};
    use taskbroker_client::{TaskContext, TaskError, Worker};
    let Some(app) = spawn_app(Backend::Sqlite).await else {
        return;
    };
    let c = Client::connect(app.url()).await.unwrap();
    let copies = ok(
        &app,
        &["submit", "fan", "--copies", "3", "--distinct-workers"],
    )
    .await;
    let ids: Vec<&str> = copies.lines().collect();
    assert_eq!(ids.len(), 3, "{copies}");
    let listed = ok(&app, &["list", "--fanout-group", ids[0], "--json"]).await;
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 3);

    let id = ok(&app, &["submit", "gpu", "--target-label", "gpu=a100"]).await;
    let id = id.trim().to_string();
    assert_eq!(
        c.get_task(&id).await.unwrap().target.unwrap().labels["gpu"],
        "a100"
    );
    async fn run(_: TaskContext) -> Result<(), TaskError> {
        Ok(())
    }
    let worker = Worker::builder(c.clone())
        .queue("gpu", run)
        .worker_id("gpu-box-1")
        .label("gpu", "a100")
        .build();
    let mut events = worker.subscribe();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(worker.run(async move {
        let _ = stopped.await;
    }));
    let done = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        loop {
            if let Ok(WorkerEvent::Finished {
                task_id,
                outcome: Outcome::Completed,
            }) = events.recv().await
            {
                break task_id;
            }
        }
    })
    .await
    .expect("the labelled worker ran the targeted task");
    assert_eq!(done, id);
    let table = ok(&app, &["workers", "--label", "gpu=a100"]).await;
    let header = table.lines().next().unwrap();
    assert!(header.starts_with("WORKER"), "{table}");
    let row = table.lines().nth(1).expect("one worker");
    assert!(row.starts_with("gpu-box-1"), "{table}");
    assert!(row.contains("gpu=a100"), "{table}");
    let one = ok(&app, &["workers", "gpu-box-1", "--json"]).await;
    let one: serde_json::Value = serde_json::from_str(&one).unwrap();
    assert_eq!(one["labels"]["gpu"], "a100");
    assert_eq!(one["queues"][0], "gpu");
    assert_eq!(
        ok(&app, &["workers", "--label", "gpu=h100"]).await,
        "no workers seen recently\n"
    );
    let _ = stop.send(());
    handle.await.unwrap().unwrap();
}
