//! `taskbroker queue ...` and `taskbroker explain` (admission) of the real
//! binary against a spawned broker.

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
async fn queues_are_set_paused_listed_and_tasks_explained_through_the_cli() {
    let app = spawn_app(Backend::Sqlite).await.expect("sqlite");
    let out = ok(
        &app,
        &[
            "queue",
            "set",
            "mail",
            "--max-concurrent",
            "10",
            "--rate-limit",
            "50",
            "--max-concurrent-per-key",
            "1",
            "--fairness",
            "round-robin-keys",
            "--priority-aging",
            "30s",
        ],
    )
    .await;
    assert!(out.contains("max_concurrent          10"), "{out}");
    assert!(out.contains("50/s (burst 50)"), "{out}");
    assert!(out.contains("round-robin-keys"), "{out}");
    let json = ok(&app, &["queue", "get", "mail", "--json"]).await;
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["max_concurrent_per_key"], 1);
    assert_eq!(v["priority_aging_seconds"], 30.0);

    let id = ok(
        &app,
        &[
            "submit",
            "mail",
            "--payload",
            "x",
            "--concurrency-key",
            "user-1",
        ],
    )
    .await;
    let id = id.trim();
    assert!(
        ok(&app, &["explain", id])
            .await
            .contains("a worker asking now would get it")
    );

    assert_eq!(
        ok(&app, &["queue", "pause", "mail"]).await,
        "paused mail (leases held run on)\n"
    );
    let why = ok(&app, &["explain", id]).await;
    assert_eq!(
        why,
        format!(
            "Task {id} is READY and waits because:\n  - Queue mail is paused.\n\
             Lease path: gated (its queue's admission gates apply).\n"
        )
    );
    let listed = ok(&app, &["queue", "list"]).await;
    assert!(
        listed.lines().nth(1).unwrap().contains("paused"),
        "{listed}"
    );
    assert_eq!(
        ok(&app, &["queue", "resume", "mail"]).await,
        "resumed mail\n"
    );
    let why: serde_json::Value =
        serde_json::from_str(&ok(&app, &["explain", id, "--json"]).await).unwrap();
    assert_eq!(why["gates"][0]["kind"], "GATE_KIND_NONE");
    // Resumed, mail keeps its limits: the gated lease takes its tasks.
    assert_eq!(why["lease_path"], "LEASE_PATH_GATED");

    // Nothing to change, and a bad value: one line each, a failing exit.
    let none = taskbroker(&app, &["queue", "set", "mail"]).await;
    assert!(!none.status.success());
    let bad = taskbroker(
        &app,
        &[
            "queue",
            "set",
            "mail",
            "--min-lease",
            "1h",
            "--max-lease",
            "1m",
        ],
    )
    .await;
    assert!(!bad.status.success());
    let err = String::from_utf8(bad.stderr).unwrap();
    assert!(
        err.starts_with("taskbroker: INVALID_ARGUMENT: ") && err.contains("min_lease"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);
    app.shutdown().await;
}
