//! A `database_url` with several hosts, against a real primary and two streaming
//! standbys of its own (scripts/pg.sh): the broker uses the host that matches
//! `target_session_attrs` wherever it is in the list, refuses to start with one
//! plain line when every host is a standby (or a standby is named alone), and
//! refuses a malformed host list the same way. A single-host URL whose host
//! becomes a standby takes the broker out of readiness until it is a primary again.

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

/// A primary and its standbys, stopped on drop.
struct Nodes {
    dirs: Vec<String>,
    /// `127.0.0.1:PORT` of the primary, then of each standby.
    hosts: Vec<String>,
    _tmp: tempfile::TempDir,
}

impl Nodes {
    fn start(standbys: usize) -> Nodes {
        let tmp = tempfile::Builder::new()
            .prefix("taskbroker-hosts")
            .tempdir()
            .unwrap();
        let dir = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
        let mut dirs = vec![dir("primary")];
        dirs.extend((1..=standbys).map(|i| dir(&format!("standby-{i}"))));
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
    let nodes = tokio::task::spawn_blocking(|| Nodes::start(2))
        .await
        .unwrap();
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
    // Without target_session_attrs (any host will do), and a standby named alone:
    // the same plain line, not a failed migration.
    let err = serve_fails(&format!("postgres://postgres@{s1},{s2}/postgres")).await;
    assert_eq!(
        err.trim(),
        format!(
            "taskbroker: cannot open the database: every host in database_url is a standby \
             (in recovery): {s1}, {s2}; the broker writes, so it needs a primary"
        ),
        "{err}"
    );
    let err = serve_fails(&format!("postgres://postgres@{s1}/postgres")).await;
    assert_eq!(
        err.trim(),
        format!(
            "taskbroker: cannot open the database: database_url names a standby (in \
             recovery), {s1}: the broker writes, so it needs the primary"
        ),
        "{err}"
    );

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

    // Reading tools may ask for a standby: `prefer-standby` chooses one, on
    // which the broker cannot write, and says so.
    let err = serve_fails(&nodes.url(&[p, s1], "prefer-standby")).await;
    assert_eq!(
        err.trim(),
        format!(
            "taskbroker: cannot open the database: database_url: \
             target_session_attrs=prefer-standby chose {s1}, a standby (in recovery); the \
             broker writes, so use target_session_attrs=read-write or primary"
        ),
        "{err}"
    );
    tokio::task::spawn_blocking(move || drop(nodes))
        .await
        .unwrap();
}

/// `GET /readyz` on a broker's metrics port: (status code, body), or `None`
/// while nothing answers.
async fn readyz(port: u16) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    let code = out.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, out.split_once("\r\n\r\n")?.1.to_string()))
}

async fn until_readyz(port: u16, want: (u16, &str)) {
    let what = format!("/readyz to answer {want:?}");
    wait_until(&what, std::time::Duration::from_secs(60), || async move {
        readyz(port)
            .await
            .is_some_and(|(code, body)| (code, body.as_str()) == want)
    })
    .await;
}

/// One host named alone (an address that did not follow a failover): when that
/// host comes back as a standby, the broker says not ready, as it does while the
/// host is away, and its writes answer UNAVAILABLE; once the host is promoted it
/// is ready again and writes land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_host_that_becomes_a_standby_is_not_ready() {
    if postgres_admin_url().is_none() {
        return; // no Postgres here (the test starts clusters of its own)
    }
    let nodes = tokio::task::spawn_blocking(|| Nodes::start(1))
        .await
        .unwrap();
    let logs = tempfile::tempdir().unwrap();
    let broker = Broker::start(
        "broker",
        logs.path(),
        &format!("postgres://postgres@{}/postgres", nodes.hosts[0]),
        &[],
    )
    .await;
    until_readyz(broker.metrics_port, (200, "ready\n")).await;
    let mut c = BrokerServiceClient::new(channel(&broker.url()));
    c.submit(pb::SubmitRequest {
        tasks: vec![spec("standby")],
    })
    .await
    .expect("submit on the primary");

    // The primary's node dies, its standby is promoted, and the node comes back
    // on its port as a standby of the new primary.
    let dirs = nodes.dirs.clone();
    tokio::task::spawn_blocking(move || {
        pg_sh(&["kill9", &dirs[0]]);
        pg_sh(&["promote", &dirs[1]]);
        pg_sh(&["standby", &dirs[1], &dirs[0]]);
    })
    .await
    .unwrap();
    until_readyz(broker.metrics_port, (503, "database is a standby\n")).await;
    let e = c
        .submit(pb::SubmitRequest {
            tasks: vec![spec("standby")],
        })
        .await
        .expect_err("a standby takes no writes");
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");

    // Promoted again: ready, and writes land.
    let dir = nodes.dirs[0].clone();
    tokio::task::spawn_blocking(move || pg_sh(&["promote", &dir]))
        .await
        .unwrap();
    until_readyz(broker.metrics_port, (200, "ready\n")).await;
    c.submit(pb::SubmitRequest {
        tasks: vec![spec("standby")],
    })
    .await
    .expect("submit once the host is a primary again");
    drop(broker);
    tokio::task::spawn_blocking(move || drop(nodes))
        .await
        .unwrap();
}
