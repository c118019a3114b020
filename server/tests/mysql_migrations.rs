//! MySQL/MariaDB migrations: they apply for a user holding every privilege on
//! its own schema and none global, with binary logging on (MySQL 8.0's default);
//! a migration the database refuses is reported in one line with the database's
//! own message; a migration left recorded as failed is run again when it may be,
//! and otherwise the error says what to do.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use taskbroker_server::store;

fn mysql_sh(args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/mysql.sh");
    let out = std::process::Command::new(script)
        .args(args)
        .output()
        .expect("run scripts/mysql.sh");
    assert!(
        out.status.success(),
        "scripts/mysql.sh {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A MariaDB server of this test's own (scripts/mysql.sh: binary logging on),
/// stopped on drop.
struct OwnServer {
    dir: PathBuf,
    port: String,
    _tmp: tempfile::TempDir,
}

impl OwnServer {
    fn start() -> OwnServer {
        let tmp = tempfile::Builder::new()
            .prefix("taskbroker-mysql-grants")
            .tempdir()
            .unwrap();
        let dir = tmp.path().join("server");
        mysql_sh(&["start", dir.to_str().unwrap()]);
        let port = std::fs::read_to_string(dir.join("port"))
            .unwrap()
            .trim()
            .to_string();
        OwnServer {
            dir,
            port,
            _tmp: tmp,
        }
    }

    /// Runs SQL as the server's root.
    fn sql(&self, sql: &str) -> String {
        mysql_sh(&["sql", self.dir.to_str().unwrap(), sql])
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        mysql_sh(&["stop", self.dir.to_str().unwrap()]);
    }
}

async fn sql(url: &str, statement: &str) {
    let mut conn = <sqlx::MySqlConnection as sqlx::Connection>::connect(url)
        .await
        .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(statement.to_owned()))
        .execute(&mut conn)
        .await
        .unwrap();
}

async fn scalar(url: &str, query: &str) -> i64 {
    let mut conn = <sqlx::MySqlConnection as sqlx::Connection>::connect(url)
        .await
        .unwrap();
    sqlx::query_scalar(sqlx::AssertSqlSafe(query.to_owned()))
        .fetch_one(&mut conn)
        .await
        .unwrap()
}

/// The migrations and a broker on them, for `owner`, who holds ALL PRIVILEGES on
/// its database only, on a server that writes a binary log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_apply_for_a_schema_owner_without_global_privileges_under_binary_logging() {
    if mysql_admin_url().is_none() {
        return; // no MariaDB here (the test starts a server of its own)
    }
    let server = tokio::task::spawn_blocking(OwnServer::start).await.unwrap();
    assert_eq!(server.sql("SELECT @@log_bin").trim(), "1");
    server.sql(
        "CREATE DATABASE owned; \
         CREATE USER 'owner'@'127.0.0.1' IDENTIFIED BY 'owner'; \
         GRANT ALL PRIVILEGES ON owned.* TO 'owner'@'127.0.0.1';",
    );
    let grants = server.sql("SHOW GRANTS FOR 'owner'@'127.0.0.1'");
    assert!(grants.contains("GRANT USAGE ON *.*"), "{grants}");
    assert!(!grants.contains("SUPER"), "{grants}");
    let url = format!("mysql://owner:owner@127.0.0.1:{}/owned", server.port);

    let s = store::connect(&url, 2).await.expect("connect");
    s.migrate()
        .await
        .expect("migrations apply for the schema's owner");
    s.migrate().await.expect("and again, with nothing to do");
    let failed = scalar(
        &url,
        "SELECT CAST(COUNT(*) AS SIGNED) FROM _sqlx_migrations WHERE NOT success",
    )
    .await;
    assert_eq!(failed, 0);

    // The broker serves on them: keys that differ in a trailing space stay apart.
    let app = spawn_on(
        std::sync::Arc::new(TestDb::from_url(url.clone())),
        Options::default(),
    )
    .await;
    let mut c = app.broker().await;
    let ids = submit(
        &mut c,
        vec![pb_keyed("inv-1"), pb_keyed("inv-1 "), pb_keyed("inv-1")],
    )
    .await;
    assert_ne!(ids[0], ids[1]);
    assert_eq!(ids[0], ids[2]);
    app.shutdown().await;
}

fn pb_keyed(key: &str) -> taskbroker_client::pb::TaskSpec {
    taskbroker_client::pb::TaskSpec {
        key: key.into(),
        ..spec("owned")
    }
}

/// A migration the database refuses is one line naming its file, the database's
/// error and what comes next. This one (its tables in place, none holding rows)
/// runs again at the next start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_migration_says_why_in_one_line_and_runs_again_when_it_may() {
    let Some(db) = test_db(Backend::Mysql).await else {
        return;
    };
    // What a migration that stopped part way leaves: one of its tables exists.
    sql(
        &db.url,
        "CREATE TABLE key_deps_lock (id TINYINT NOT NULL PRIMARY KEY)",
    )
    .await;
    let s = store::connect(&db.url, 2).await.expect("connect");
    let e = s
        .migrate()
        .await
        .expect_err("the table is in the way")
        .to_string();
    assert!(!e.contains('\n'), "{e}");
    assert!(
        e.starts_with("migration 4 (migrations/mysql/0004_flow_keys.sql) failed: error 1050: "),
        "{e}"
    );
    assert!(e.contains("'key_deps_lock' already exists"), "{e}");
    assert!(e.ends_with("runs again at the next start"), "{e}");
    let failed = "SELECT CAST(COUNT(*) AS SIGNED) FROM _sqlx_migrations WHERE NOT success";
    assert_eq!(scalar(&db.url, failed).await, 1);

    // The next start undoes what it left and runs it, and the rest.
    s.migrate().await.expect("the failed migration runs again");
    assert_eq!(scalar(&db.url, failed).await, 0);
    let applied = "SELECT CAST(MAX(version) AS SIGNED) FROM _sqlx_migrations";
    assert!(scalar(&db.url, applied).await >= 5);
}

/// A failed migration that may not simply run again stops the start with what
/// to do; done, the next start goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_migration_that_may_not_run_again_says_what_to_do() {
    let Some(db) = test_db(Backend::Mysql).await else {
        return;
    };
    sql(
        &db.url,
        "CREATE TABLE lease_workers (worker_id VARCHAR(8) PRIMARY KEY)",
    )
    .await;
    let s = store::connect(&db.url, 2).await.expect("connect");
    let what_to_do = "undo what that file created, then run \
        `DELETE FROM _sqlx_migrations WHERE version = 2` and start the broker again";
    let e = s
        .migrate()
        .await
        .expect_err("the table is in the way")
        .to_string();
    assert!(!e.contains('\n'), "{e}");
    assert!(
        e.starts_with("migration 2 (migrations/mysql/0002_lease_workers.sql) failed: error 1050: "),
        "{e}"
    );
    assert!(e.ends_with(what_to_do), "{e}");
    // At the next start, the same advice, and nothing changed.
    let again = s
        .migrate()
        .await
        .expect_err("still recorded as failed")
        .to_string();
    assert!(
        again.starts_with(
            "migration 2 (migrations/mysql/0002_lease_workers.sql) is recorded as failed"
        ),
        "{again}"
    );
    assert!(again.ends_with(what_to_do), "{again}");

    // Doing what it says lets the migrations finish.
    sql(
        &db.url,
        "DROP TABLE lease_workers; DELETE FROM _sqlx_migrations WHERE version = 2",
    )
    .await;
    s.migrate().await.expect("the migrations finish");
}
