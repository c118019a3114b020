//! The CLI covers the API: submit with every task option, get showing them,
//! update, events and watch, against a real broker over gRPC.

mod common;

use std::process::{Output, Stdio};

use common::*;
use taskbroker_client::Client;
use tokio::io::{AsyncBufReadExt, BufReader};
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
async fn submit_options_get_update_events_and_watch() {
    let Some(app) = spawn_app(Backend::Sqlite).await else {
        return;
    };
    let c = Client::connect(app.url()).await.unwrap();
    let first = ok(&app, &["submit", "jobs", "--payload", "a"]).await;
    let first = first.trim();
    let out = ok(
        &app,
        &[
            "submit",
            "jobs",
            "--payload",
            "b",
            "--depends-on",
            first,
            "--concurrency-key",
            "tenant-1",
            "--target-worker",
            "w9",
            "--target-label",
            "gpu=a100",
            "--retry-schedule",
            "1m,5m,20m",
            "--metadata",
            "team=infra",
            "--meta",
            "env=prod",
        ],
    )
    .await;
    let id = out.trim().to_string();
    let t = c.get_task(&id).await.unwrap();
    assert_eq!(t.depends_on, [first.to_string()]);
    assert_eq!(t.concurrency_key, "tenant-1");
    let target = t.target.clone().unwrap();
    assert_eq!(target.worker_id, "w9");
    assert_eq!(target.labels["gpu"], "a100");
    assert_eq!(t.metadata["team"], "infra");
    assert_eq!(t.metadata["env"], "prod");
    // list by target worker and by a metadata entry (key and value, or key alone).
    for filter in [
        &["--target-worker", "w9"][..],
        &["--metadata", "team=infra"],
        &["--meta", "env"],
    ] {
        let listed = ok(&app, &[&["list", "--json"][..], filter].concat()).await;
        assert!(listed.contains(&id), "{filter:?}: {listed}");
    }
    let other = ok(&app, &["list", "--json", "--metadata", "team=web"]).await;
    assert!(!other.contains(&id), "{other}");
    let shown = ok(&app, &["get", &id]).await;
    for want in ["depends on", "tenant-1", "target worker", "gpu=a100"] {
        assert!(shown.contains(want), "{want:?} missing from:\n{shown}");
    }
    // --fanout makes copies; --at-most-once marks the task.
    let copies = ok(&app, &["submit", "fan", "--fanout", "3"]).await;
    assert_eq!(copies.lines().count(), 3);
    let once = ok(&app, &["submit", "once", "--at-most-once"]).await;
    let once = c.get_task(once.trim()).await.unwrap();
    assert!(once.at_most_once);
    assert_eq!(once.max_attempts, 1);
    assert!(ok(&app, &["get", &once.id]).await.contains("at most once"));
    // --checkpoint and --checkpoint-file: the first attempt's checkpoint.
    let seeded = ok(&app, &["submit", "seeded", "--checkpoint", "step=2"]).await;
    let seeded = c.get_task(seeded.trim()).await.unwrap();
    assert_eq!(
        (seeded.has_checkpoint, &seeded.checkpoint[..]),
        (true, &b"step=2"[..])
    );
    let file = std::env::temp_dir().join(format!("tb-checkpoint-{}", std::process::id()));
    std::fs::write(&file, b"\x00\xffbin").unwrap();
    let path = file.to_str().unwrap();
    let from_file = ok(&app, &["submit", "seeded", "--checkpoint-file", path]).await;
    std::fs::remove_file(&file).unwrap();
    let from_file = c.get_task(from_file.trim()).await.unwrap();
    assert_eq!(from_file.checkpoint, b"\x00\xffbin");
    let both = taskbroker(
        &app,
        &[
            "submit",
            "seeded",
            "--checkpoint",
            "a",
            "--checkpoint-file",
            path,
        ],
    )
    .await;
    assert!(
        !both.status.success(),
        "--checkpoint with --checkpoint-file"
    );
    let plain = c.get_task(&id).await.unwrap();
    assert!(!plain.has_checkpoint);

    // update
    let updated = ok(
        &app,
        &["update", &id, "--priority", "7", "--max-attempts", "9"],
    )
    .await;
    assert!(updated.contains("priority"), "{updated}");
    let t = c.get_task(&id).await.unwrap();
    assert_eq!((t.priority, t.max_attempts), (7, 9));
    let none = taskbroker(&app, &["update", &id]).await;
    assert!(!none.status.success());
    // A waiting task's target: set to labels, then cleared.
    ok(&app, &["update", &id, "--target-label", "gpu=a100"]).await;
    let t = c.get_task(&id).await.unwrap();
    let labels = t.target.map(|t| t.labels).unwrap_or_default();
    assert_eq!(labels.get("gpu").map(String::as_str), Some("a100"));
    let listed = ok(&app, &["list", "--target-label", "gpu=a100", "--json"]).await;
    assert!(listed.contains(&id), "{listed}");
    let none = ok(&app, &["list", "--target-label", "gpu=h100", "--json"]).await;
    assert!(!none.contains(&id), "{none}");
    ok(&app, &["update", &id, "--clear-target"]).await;
    let t = c.get_task(&id).await.unwrap();
    assert!(
        t.target
            .is_none_or(|t| t.worker_id.is_empty() && t.labels.is_empty())
    );

    // events: submitted, then updated.
    let events = ok(&app, &["events", &id]).await;
    assert!(events.contains("submitted"), "{events}");
    assert!(events.contains("updated"), "{events}");

    // watch: a line per event as it happens.
    let mut child = Command::new(env!("CARGO_BIN_EXE_taskbroker"))
        .args(["watch", "--queue", "later", "--addr", &app.url()])
        .env_remove("TASKBROKER_ADDR")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // The stream is open once the broker counts its watcher; submit until a
    // line arrives (an event before the stream opened is not replayed).
    let watched = loop {
        let sent = ok(&app, &["submit", "later"]).await;
        let next = tokio::time::timeout(std::time::Duration::from_millis(500), lines.next_line());
        if let Ok(line) = next.await {
            break (sent, line.unwrap().expect("a line"));
        }
    };
    assert!(watched.1.contains("submitted"), "{}", watched.1);
    assert!(watched.1.contains("later"), "{}", watched.1);
    child.kill().await.unwrap();

    // A dependency by key waits for a task with that key; get shows the key
    // as QUEUE/KEY, the form explain prints and --depends-on-key takes (the
    // QUEUE:KEY form is read too).
    let out = ok(&app, &["submit", "jobs", "--depends-on-key", "other/k1"]).await;
    let shown = ok(&app, &["get", out.trim()]).await;
    assert!(shown.contains("other/k1"), "{shown}");
    let out = ok(&app, &["submit", "jobs", "--depends-on-key", "other:k3"]).await;
    let shown = ok(&app, &["get", out.trim()]).await;
    assert!(shown.contains("other/k3"), "{shown}");
    let explained = ok(&app, &["explain", out.trim()]).await;
    assert!(explained.contains("other/k3"), "{explained}");
    // A refused key is one plain line naming its field.
    let o = taskbroker(
        &app,
        &[
            "submit",
            "jobs",
            "--key",
            "k2",
            "--depends-on-key",
            "jobs/k2",
        ],
    )
    .await;
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("depends_on_keys"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let bad = taskbroker(&app, &["submit", "jobs", "--depends-on-key", "nokey"]).await;
    assert!(!bad.status.success());
    app.shutdown().await;
}

/// The first help a reader sees names every store: `serve --help` and
/// `relay --help` say MySQL/MariaDB beside SQLite and Postgres.
#[tokio::test]
async fn help_names_every_store() {
    for cmd in ["serve", "relay", "migrate"] {
        let o = Command::new(env!("CARGO_BIN_EXE_taskbroker"))
            .args([cmd, "--help"])
            .output()
            .await
            .expect("the binary runs");
        assert!(o.status.success(), "{cmd} --help");
        let help = String::from_utf8(o.stdout).unwrap();
        assert!(help.contains("mysql://"), "{cmd} --help:\n{help}");
        assert!(help.contains("MariaDB"), "{cmd} --help:\n{help}");
        if cmd != "relay" {
            assert!(help.contains("sqlite://"), "{cmd} --help:\n{help}");
        }
    }
}
