//! `taskbroker bucket ...`, `taskbroker cooldown ...` and `submit --bucket` of
//! the real binary against a spawned broker.

mod common;

use std::process::Output;
use std::time::Duration;

use common::{Backend, TestApp, lease_one, spawn_app};
use taskbroker_client::pb;
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
async fn buckets_and_cooldowns_through_the_cli() {
    let app = spawn_app(Backend::Sqlite).await.expect("sqlite");
    let out = ok(
        &app,
        &[
            "bucket",
            "set",
            "partner",
            "--rate-limit",
            "20",
            "--burst",
            "20",
            "--max-concurrent",
            "5",
        ],
    )
    .await;
    assert!(out.contains("20/s (burst 20)"), "{out}");
    assert!(out.contains("max_concurrent:  5"), "{out}");
    let id = ok(
        &app,
        &[
            "submit",
            "q",
            "--bucket",
            "partner",
            "--concurrency-key",
            "acme",
        ],
    )
    .await;
    let id = id.trim().to_string();
    let mut c = app.broker().await;
    let t = lease_one(&mut c, "q").await;
    assert_eq!(t.task_id, id);
    let json = ok(&app, &["bucket", "get", "partner", "--json"]).await;
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["leases_held"], 1);
    assert_eq!(v["tokens"], 19.0);
    let list = ok(&app, &["bucket", "list"]).await;
    assert!(list.starts_with("BUCKET"), "{list}");
    assert!(list.contains("partner"), "{list}");
    c.fail(pb::FailRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
        cooldown: Some(pb::Cooldown {
            scope: pb::CooldownScope::ConcurrencyKey as i32,
            duration: common::dur(Duration::from_secs(60)),
        }),
        ..Default::default()
    })
    .await
    .expect("fail with cooldown");
    let cds = ok(&app, &["cooldown", "list", "--json"]).await;
    let v: serde_json::Value = serde_json::from_str(&cds).unwrap();
    assert_eq!(v[0]["queue"], "q");
    assert_eq!(v[0]["concurrency_key"], "acme");
    assert_eq!(v[0]["task_id"], id.as_str());
    let out = ok(&app, &["cooldown", "lift", "--queue", "q", "--key", "acme"]).await;
    assert_eq!(out, "lifted the cooldown of key acme of queue q\n");
    let out = ok(&app, &["cooldown", "lift", "--bucket", "partner"]).await;
    assert_eq!(out, "no cooldown of bucket partner\n");
    assert_eq!(ok(&app, &["cooldown", "list"]).await, "no cooldowns\n");
    // Neither a key nor a bucket: a usage error, before any call.
    let o = taskbroker(&app, &["cooldown", "lift"]).await;
    assert!(!o.status.success());
    let out = ok(&app, &["bucket", "delete", "partner"]).await;
    assert_eq!(out, "deleted bucket partner\n");
    assert_eq!(ok(&app, &["bucket", "list"]).await, "no buckets\n");
    app.shutdown().await;
}
