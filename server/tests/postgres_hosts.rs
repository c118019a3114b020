//! A `database_url` with several hosts, against a real primary and two streaming
//! standbys of its own (scripts/pg.sh): the broker uses the host that matches
//! `target_session_attrs` wherever it is in the list, refuses to start with one
//! plain line when every host is a standby, and refuses a malformed host list the
//! same way.

mod common;
mod fault_harness;

use std::path::Path;

use common::*;
use fault_harness::*;
use taskbroker_client::pb;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;

fn pg_sh(args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/pg.sh");
    let out = std::process::Command::new(script)
        .args(args)
        .output()
        .expect("run scripts/pg.sh");
    assert!(
        out.status.success(),
        "scripts/pg.sh {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A primary and two standbys, stopped on drop.
struct Nodes {
    dirs: Vec<String>,
    /// `127.0.0.1:PORT` of the primary, then of each standby.
    hosts: Vec<String>,
    _tmp: tempfile::TempDir,
}

impl Nodes {
    fn start() -> Nodes {
        let tmp = tempfile::Builder::new()
            .prefix("taskbroker-hosts")
            .tempdir()
            .unwrap();
        let dir = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
        let dirs = vec![dir("primary"), dir("standby-1"), dir("standby-2")];
        let printed = pg_sh(&["start", &dirs[0]]);
        let primary = printed
            .trim()
            .rsplit('@')
            .next()
            .and_then(|h| h.split('/').next())
            .expect("pg.sh prints the URL")
            .to_string();
        let mut hosts = vec![primary];
        for d in &dirs[1..] {
            hosts.push(pg_sh(&["standby", &dirs[0], d]).trim().to_string());
        }
        Nodes {
            dirs,
            hosts,
            _tmp: tmp,
        }
    }

    fn url(&self, hosts: &[&str], attrs: &str) -> String {
        format!(
            "postgres://postgres@{}/postgres?target_session_attrs={attrs}",
            hosts.join(",")
        )
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for d in self.dirs.iter().rev() {
            pg_sh(&["stop", d]);
        }
    }
}

/// Runs `taskbroker serve` on `url` and returns its exit status and stderr; it
/// must exit by itself.
async fn serve_fails(url: &str) -> String {
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_taskbroker"))
            .args(["serve", "--listen", "127.0.0.1:0", "--database-url", url])
            .env_remove("RUST_LOG")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the broker exits by itself")
    .expect("run taskbroker");
    assert!(!out.status.success(), "started on {url}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_uses_the_host_that_matches_and_refuses_all_standbys() {
    if postgres_admin_url().is_none() {
        return; // no Postgres here (the test starts clusters of its own)
    }
    let nodes = tokio::task::spawn_blocking(Nodes::start).await.unwrap();
    let (p, s1, s2) = (&nodes.hosts[0], &nodes.hosts[1], &nodes.hosts[2]);

    // Every host a standby: one plain line naming each, and no start.
    let err = serve_fails(&nodes.url(&[s1, s2], "read-write")).await;
    assert_eq!(
        err.trim(),
        format!(
            "taskbroker: cannot open the database: no host in database_url accepts \
             target_session_attrs=read-write: {s1} is a standby; {s2} is a standby"
        ),
        "{err}"
    );
    let err = serve_fails(&nodes.url(&[s1, s2], "primary")).await;
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("target_session_attrs=primary"), "{err}");

    // A malformed host list: one line naming it.
    let err = serve_fails(&format!("postgres://postgres@{p},,{s1}/postgres")).await;
    assert_eq!(
        err.trim(),
        "taskbroker: cannot open the database: database_url: an empty host in the host list"
    );

    // The primary last in the list: the broker finds it, and writes land on it.
    let logs = tempfile::tempdir().unwrap();
    let broker = Broker::start(
        "broker",
        logs.path(),
        &nodes.url(&[s1, s2, p], "read-write"),
        &[],
    )
    .await;
    let mut c = BrokerServiceClient::new(channel(&broker.url()));
    let id = c
        .submit(pb::SubmitRequest {
            tasks: vec![spec("hosts")],
        })
        .await
        .expect("submit through the multi-host URL")
        .into_inner()
        .results[0]
        .task_id
        .clone();
    let on_primary = format!("postgres://postgres@{p}/postgres");
    let mut db = <sqlx::PgConnection as sqlx::Connection>::connect(&on_primary)
        .await
        .unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE id = $1")
        .bind(&id)
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(n, 1, "the task is on the primary");
    drop(broker);

    // Reading tools may ask for a standby: `prefer-standby` starts on one (the
    // migrations cannot run there, which is the broker's own plain error).
    let err = serve_fails(&nodes.url(&[p, s1], "prefer-standby")).await;
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("migrate"), "{err}");
    tokio::task::spawn_blocking(move || drop(nodes))
        .await
        .unwrap();
}
