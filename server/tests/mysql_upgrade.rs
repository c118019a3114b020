//! A MySQL/MariaDB database migrated with the first text of migration 0004,
//! which created a trigger binding key waits (a trigger needs SUPER where
//! binary logging is on), starts on this broker: the recorded checksum of that
//! text is taken for the current one, the trigger is dropped, and key waits
//! bind once, in the broker. Any other text recorded for version 4 is still
//! refused. Runs when TASKBROKER_TEST_MYSQL_URL names a server.

mod common;

use std::path::Path;

use chrono::{DateTime, Utc};
use common::*;
use sha2::Digest;
use sqlx::MySqlPool;
use taskbroker_server::domain::RetryPolicy;
use taskbroker_server::store::{self, FlowInserted, FlowSpec, NewTask, TaskKey};

const MIGRATIONS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations/mysql");
/// Migration 0004 as it first shipped (with its trigger).
const FIRST_0004: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/mysql_0004/0004_flow_keys.sql"
);

/// Migrates `url` with migrations 0001 to 0003 and `v4` as 0004, as an
/// earlier broker did.
async fn migrate_as_before(url: &str, v4: &str) -> MySqlPool {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(MIGRATIONS).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if ["0001_", "0002_", "0003_"]
            .iter()
            .any(|v| name.starts_with(v))
        {
            std::fs::copy(&path, dir.path().join(&name)).unwrap();
        }
    }
    std::fs::write(dir.path().join("0004_flow_keys.sql"), v4).unwrap();
    let pool = MySqlPool::connect(url).await.unwrap();
    sqlx::migrate::Migrator::new(Path::new(dir.path()))
        .await
        .unwrap()
        .run(&pool)
        .await
        .unwrap();
    pool
}

async fn triggers(pool: &MySqlPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.triggers \
         WHERE trigger_schema = DATABASE() AND trigger_name = 'tasks_flow_bind_keys'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(1_800_000_000_000).unwrap()
}

fn task(id: &str, key: Option<&str>) -> NewTask {
    NewTask {
        routing: Default::default(),
        id: id.into(),
        queue: "up".into(),
        key: key.map(str::to_string),
        payload: Vec::new(),
        priority: 0,
        run_at: t0(),
        deadline: None,
        retry: RetryPolicy::default(),
        metadata: Default::default(),
        concurrency_key: None,
        checkpoint: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_migrated_with_the_trigger_starts_and_binds_waits_once() {
    let Some(db) = test_db(Backend::Mysql).await else {
        return;
    };
    let first = std::fs::read_to_string(FIRST_0004).unwrap();
    let pool = migrate_as_before(&db.url, &first).await;
    assert_eq!(triggers(&pool).await, 1, "the first text made the trigger");
    // A wait of bob's recorded then, for a key nobody holds yet.
    let bobs = "00000000-0000-7000-8000-000000000009";
    sqlx::query(
        "INSERT INTO tasks (id, queue, payload, run_at, state, max_attempts, attempts_allowed, \
         initial_backoff_ms, backoff_multiplier, max_backoff_ms, jitter, metadata, created_at, \
         updated_at, deps_remaining) \
         VALUES (?, 'down', '', 0, 'blocked', 3, 3, 0, 2, 0, 0, ?, 0, 0, 1)",
    )
    .bind(bobs)
    .bind(r#"{"taskbroker.producer":"bob"}"#)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("INSERT INTO task_key_deps (task_id, queue, `key`) VALUES (?, 'up', 'hers')")
        .bind(bobs)
        .execute(&pool)
        .await
        .unwrap();

    let s = store::connect(&db.url, 4).await.unwrap();
    s.migrate().await.expect("an earlier database migrates");
    assert_eq!(triggers(&pool).await, 0, "the trigger is gone");
    let recorded: Vec<u8> =
        sqlx::query_scalar("SELECT checksum FROM _sqlx_migrations WHERE version = 4")
            .fetch_one(&pool)
            .await
            .unwrap();
    let now = std::fs::read(Path::new(MIGRATIONS).join("0004_flow_keys.sql")).unwrap();
    assert_eq!(recorded, sha2::Sha384::digest(&now).to_vec());
    // A second start finds nothing to change.
    s.migrate().await.expect("migrates again");

    // A wait, then its key: bound once, by the broker.
    let waiting = "00000000-0000-7000-8000-000000000001";
    let holder = "00000000-0000-7000-8000-000000000002";
    let k = TaskKey {
        queue: "up".into(),
        key: "k".into(),
    };
    let flow = FlowSpec {
        depends_on_keys: vec![k.clone()],
        ..Default::default()
    };
    let r = s
        .task_insert_flow(&[task(waiting, None)], &[flow], t0(), None)
        .await
        .unwrap();
    assert!(matches!(r, FlowInserted::Done(_)), "{r:?}");
    assert_eq!(s.task_keys_missing(waiting, 10).await.unwrap(), vec![k]);
    s.task_insert_many(&[task(holder, Some("k"))], t0())
        .await
        .unwrap();
    assert!(s.task_keys_missing(waiting, 10).await.unwrap().is_empty());
    assert_eq!(
        s.task_deps_unfinished(waiting, 10).await.unwrap(),
        vec![holder.to_string()]
    );
    // Bob's earlier wait is his: alice's task with the key binds it not.
    let mut hers = task("00000000-0000-7000-8000-000000000003", Some("hers"));
    hers.metadata
        .insert("taskbroker.producer".into(), "alice".into());
    s.task_insert_many(&[hers], t0()).await.unwrap();
    let missing = s.task_keys_missing(bobs, 10).await.unwrap();
    assert_eq!(missing.len(), 1, "bob's wait is still unbound");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_recorded_text_of_version_4_is_still_refused() {
    let Some(db) = test_db(Backend::Mysql).await else {
        return;
    };
    let first = std::fs::read_to_string(FIRST_0004).unwrap();
    let edited = format!("{first}\n-- edited by hand\n");
    let pool = migrate_as_before(&db.url, &edited).await;
    let s = store::connect(&db.url, 4).await.unwrap();
    let e = s.migrate().await.unwrap_err();
    assert!(
        e.to_string()
            .contains("migration 4 was previously applied but has been modified"),
        "{e}"
    );
    let recorded: Vec<u8> =
        sqlx::query_scalar("SELECT checksum FROM _sqlx_migrations WHERE version = 4")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(recorded, sha2::Sha384::digest(edited.as_bytes()).to_vec());
}

/// No MySQL migration creates or drops a stored program (trigger, function,
/// procedure, event): where binary logging is on, either needs SUPER (or
/// `log_bin_trust_function_creators`), which managed servers do not grant a
/// user who holds every privilege on its own schema.
#[test]
fn mysql_migrations_create_no_stored_programs() {
    for entry in std::fs::read_dir(MIGRATIONS).unwrap() {
        let path = entry.unwrap().path();
        let sql = std::fs::read_to_string(&path).unwrap().to_ascii_uppercase();
        let code: String = sql
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n");
        for what in ["TRIGGER", "FUNCTION", "PROCEDURE", "EVENT"] {
            let create = code
                .split_whitespace()
                .collect::<Vec<_>>()
                .windows(2)
                .any(|w| matches!(w[0], "CREATE" | "DROP") && w[1] == what);
            assert!(!create, "{} creates or drops a {what}", path.display());
        }
    }
}
