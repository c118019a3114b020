//! `taskbroker queue update --payload-schema FILE`, `--clear-payload-schema`,
//! `queue schema` and `queue get` of the real binary against a spawned broker.

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

const ORDER: &str =
    r#"{"type":"object","required":["amount"],"properties":{"amount":{"type":"integer"}}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_schemas_through_the_cli() {
    let app = spawn_app(Backend::Sqlite).await.expect("sqlite");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("order.schema.json");
    std::fs::write(&file, ORDER).unwrap();
    let file = file.to_str().unwrap();
    let out = ok(
        &app,
        &["queue", "update", "orders", "--payload-schema", file],
    )
    .await;
    assert!(
        out.contains(&format!("payload_schema          {} bytes", ORDER.len())),
        "{out}"
    );
    // `queue schema` prints the document as stored, for code generators.
    assert_eq!(
        ok(&app, &["queue", "schema", "orders"]).await,
        format!("{ORDER}\n")
    );
    let json = ok(&app, &["queue", "get", "orders", "--json"]).await;
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["payload_schema"]["required"][0], "amount");
    // Submit checks payloads against it.
    ok(&app, &["submit", "orders", "--payload", r#"{"amount": 1}"#]).await;
    let o = taskbroker(
        &app,
        &["submit", "orders", "--payload", r#"{"amount": "x"}"#],
    )
    .await;
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(r#"/amount: "x" is not of type "integer""#),
        "{err}"
    );
    // A bad schema is refused, naming the field, and the old one stays.
    std::fs::write(dir.path().join("bad.json"), r#"{"type": 5}"#).unwrap();
    let bad = dir.path().join("bad.json");
    let o = taskbroker(
        &app,
        &[
            "queue",
            "set",
            "orders",
            "--payload-schema",
            bad.to_str().unwrap(),
        ],
    )
    .await;
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("config.payload_schema"), "{err}");
    assert_eq!(
        ok(&app, &["queue", "schema", "orders"]).await,
        format!("{ORDER}\n")
    );
    // A missing file is a plain error.
    let o = taskbroker(
        &app,
        &[
            "queue",
            "set",
            "orders",
            "--payload-schema",
            "/nonexistent/x.json",
        ],
    )
    .await;
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot read /nonexistent/x.json"));
    // Cleared: `queue schema` says there is none, and payloads are opaque again.
    let out = ok(
        &app,
        &["queue", "update", "orders", "--clear-payload-schema"],
    )
    .await;
    assert!(out.contains("payload_schema          -"), "{out}");
    let o = taskbroker(&app, &["queue", "schema", "orders"]).await;
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("has no payload schema"));
    ok(&app, &["submit", "orders", "--payload", "opaque"]).await;
    app.shutdown().await;
}
