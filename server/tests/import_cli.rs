//! `taskbroker import` drains the task table of docs/migrating.md (on MariaDB/MySQL
//! and on Postgres) into tasks on a live broker: each waiting row one task with its
//! queue, key, payload, priority, run time, attempts and checkpoint (the first lease
//! hands a row's old checkpoint over); a re-run doubles nothing; a
//! dry run submits nothing; a row that cannot be a task is named and skipped (or
//! stops the run). Runs when TASKBROKER_TEST_MYSQL_URL / TASKBROKER_TEST_POSTGRES_URL
//! name servers (scripts/mysql.sh, scripts/pg.sh).

mod common;
mod mysql_producer;

use std::process::Output;

use common::*;
use mysql_producer::MySqlDb;
use taskbroker_client::pb;
use tokio::process::Command;

/// The old table of docs/migrating.md.
const JOBS_MYSQL: &str = "CREATE TABLE jobs (
  id           bigint AUTO_INCREMENT PRIMARY KEY,
  kind         varchar(64)  NOT NULL,
  payload      json         NOT NULL,
  priority     int          NOT NULL DEFAULT 0,
  status       enum('pending','running','done','failed') NOT NULL DEFAULT 'pending',
  retry_count  int          NOT NULL DEFAULT 0,
  max_retries  int          NOT NULL DEFAULT 5,
  next_run_at  datetime     NOT NULL DEFAULT CURRENT_TIMESTAMP,
  locked_by    varchar(64)  NULL,
  locked_until datetime     NULL,
  last_error   text         NULL,
  created_at   datetime     NOT NULL DEFAULT CURRENT_TIMESTAMP,
  state        blob         NULL
)";

/// The same table as a Postgres team has it.
const JOBS_POSTGRES: &str = "CREATE TABLE jobs (
  id           bigserial PRIMARY KEY,
  kind         varchar(64)  NOT NULL,
  payload      jsonb        NOT NULL,
  priority     int          NOT NULL DEFAULT 0,
  status       text         NOT NULL DEFAULT 'pending',
  retry_count  int          NOT NULL DEFAULT 0,
  max_retries  int          NOT NULL DEFAULT 5,
  next_run_at  timestamptz  NOT NULL DEFAULT now(),
  locked_by    varchar(64)  NULL,
  locked_until timestamptz  NULL,
  last_error   text         NULL,
  created_at   timestamptz  NOT NULL DEFAULT now(),
  state        bytea        NULL
)";

/// One row: id, kind, payload, priority, status, retry_count, next_run_at (Unix s).
type Job = (i64, &'static str, &'static str, i32, &'static str, i32, i64);

/// Waiting rows (due, retried, due later), a finished one and one whose kind is no
/// queue name.
fn jobs(now: i64) -> Vec<Job> {
    vec![
        (
            1,
            "emails",
            r#"{"to": "a@example.com"}"#,
            5,
            "pending",
            0,
            now - 60,
        ),
        (2, "invoices", r#"{"n": 2}"#, -2, "pending", 2, now + 3600),
        (3, "emails", r#"{"to": "done"}"#, 0, "done", 0, now - 600),
        (4, "bad kind!", r#"{"n": 4}"#, 0, "pending", 0, now - 60),
        (
            5,
            "emails",
            r#"{"to": "e@example.com"}"#,
            0,
            "pending",
            5,
            now - 30,
        ),
    ]
}

/// The old handler's saved progress of row 1 (`state`; NULL in the other rows),
/// not valid UTF-8.
const STATE: &[u8] = b"step=3\xff\x00";

/// The session time zone the MySQL rows are written and read in (not UTC).
const TIME_ZONE: &str = "+02:00";

async fn taskbroker(app: &TestApp, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_taskbroker"))
        .arg("import")
        .args(args)
        .args(["--addr", &app.url()])
        .env_remove("TASKBROKER_ADDR")
        .env_remove("TASKBROKER_IMPORT_FROM")
        .output()
        .await
        .expect("the binary runs")
}

async fn ok(app: &TestApp, args: &[&str]) -> String {
    let o = taskbroker(app, args).await;
    assert!(
        o.status.success(),
        "taskbroker import {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

async fn fails(app: &TestApp, args: &[&str]) -> String {
    let o = taskbroker(app, args).await;
    assert!(
        !o.status.success(),
        "taskbroker import {args:?} succeeded: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8(o.stderr).unwrap()
}

async fn all_tasks(app: &TestApp) -> Vec<pb::Task> {
    let mut out = Vec::new();
    for queue in ["emails", "invoices"] {
        let mut admin = app.admin().await;
        out.extend(
            admin
                .list_tasks(pb::ListTasksRequest {
                    queue: queue.into(),
                    ..Default::default()
                })
                .await
                .expect("list")
                .into_inner()
                .tasks,
        );
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

/// The mapping of docs/migrating.md, as flags.
fn mapping(from: &str) -> Vec<String> {
    [
        "--from",
        from,
        "--table",
        "jobs",
        "--map",
        "queue=kind",
        "--map",
        "payload=payload",
        "--map",
        "priority=priority",
        "--map",
        "run_at=next_run_at",
        "--map",
        "attempts=max_retries - retry_count + 1",
        "--map",
        "checkpoint=state",
        "--where",
        "status = 'pending'",
        "--batch",
        "2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

async fn imports_the_table(from: &str, extra: &[&str], now: i64) {
    let app = spawn_app(Backend::Sqlite).await.expect("a SQLite broker");
    let mut args = mapping(from);
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    // A dry run maps and shows, and submits nothing.
    let mut dry = args.clone();
    dry.push("--dry-run");
    let out = ok(&app, &dry).await;
    assert!(out.contains("would submit 3 tasks"), "{out}");
    assert!(out.contains("(4 rows read, 1 bad rows)"), "{out}");
    assert!(out.contains("queue=emails key=jobs:1 priority=5"), "{out}");
    assert!(out.contains("checkpoint=8 bytes"), "{out}");
    assert!(all_tasks(&app).await.is_empty(), "a dry run submitted");

    let o = taskbroker(&app, &args).await;
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(
        out,
        "imported: read 4, submitted 3 new, 0 already there, 1 bad rows skipped\n"
    );
    assert!(
        err.contains("row id = 4 skipped: queue \"bad kind!\""),
        "{err}"
    );

    let tasks = all_tasks(&app).await;
    let keys: Vec<&str> = tasks.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(keys, ["jobs:1", "jobs:2", "jobs:5"]);
    let (one, two, five) = (&tasks[0], &tasks[1], &tasks[2]);
    assert_eq!(one.queue, "emails");
    assert_eq!(one.payload, br#"{"to": "a@example.com"}"#);
    assert_eq!((one.priority, one.max_attempts), (5, 6));
    assert_eq!(one.state(), pb::TaskState::Ready);
    assert_eq!(two.queue, "invoices");
    assert_eq!(two.payload, br#"{"n": 2}"#);
    assert_eq!((two.priority, two.max_attempts), (-2, 4));
    assert_eq!(two.state(), pb::TaskState::Scheduled);
    assert_eq!(two.run_at.as_ref().unwrap().seconds, now + 3600);
    // No retries left: it still runs once.
    assert_eq!(five.max_attempts, 1);

    // A re-run (after a crash, or twice by hand) doubles nothing.
    let out = ok(&app, &args).await;
    assert_eq!(
        out,
        "imported: read 4, submitted 0 new, 3 already there, 1 bad rows skipped\n"
    );
    assert_eq!(all_tasks(&app).await.len(), 3);

    // The bad row stops the run when asked, naming it.
    let mut strict = args.clone();
    strict.push("--stop-on-bad-row");
    let err = fails(&app, &strict).await;
    assert!(err.contains("row id = 4: queue \"bad kind!\""), "{err}");

    // A query without the id column: one line naming --id, nothing submitted.
    let err = fails(
        &app,
        &[
            "--from",
            from,
            "--query",
            "SELECT kind, payload FROM jobs",
            "--map",
            "queue=kind",
            "--map",
            "payload=payload",
        ],
    )
    .await;
    assert!(err.contains("--id \"id\""), "{err}");

    // A query, a literal queue and a key prefix: row 1 again, already there.
    let out = ok(
        &app,
        &[
            "--from",
            from,
            "--query",
            "SELECT id AS legacy, payload FROM jobs WHERE id = 1",
            "--id",
            "legacy",
            "--map",
            "queue='emails'",
            "--map",
            "payload=payload",
            "--key-prefix",
            "jobs",
        ],
    )
    .await;
    assert_eq!(
        out,
        "imported: read 1, submitted 0 new, 1 already there, 0 bad rows skipped\n"
    );

    // An empty table imports nothing.
    let mut empty = args.clone();
    let w = empty
        .iter()
        .position(|a| *a == "status = 'pending'")
        .unwrap();
    empty[w] = "status = 'nothing'";
    let out = ok(&app, &empty).await;
    assert_eq!(
        out,
        "imported: read 0, submitted 0 new, 0 already there, 0 bad rows skipped\n"
    );

    // A batch past the maximum (one Submit's 1000 tasks) is refused before reading.
    let mut huge = args.clone();
    let b = huge.iter().position(|a| *a == "2").unwrap();
    huge[b] = "1000000";
    let err = fails(&app, &huge).await;
    assert!(err.contains("--batch") && err.contains("1..=1000"), "{err}");
    // Neither is a mapping without a queue.
    let err = fails(
        &app,
        &[
            "--from",
            from,
            "--table",
            "jobs",
            "--map",
            "payload=payload",
        ],
    )
    .await;
    assert!(err.contains("--map queue=COLUMN is required"), "{err}");
    // A field the broker has no place for is named, not ignored.
    let err = fails(
        &app,
        &[
            "--from",
            from,
            "--table",
            "jobs",
            "--map",
            "locked_by=locked_by",
        ],
    )
    .await;
    assert!(err.contains("unknown field \"locked_by\""), "{err}");

    // The first lease of a row's task hands its old checkpoint over; a row
    // whose checkpoint is NULL starts with none.
    let mut broker = app.broker().await;
    let leased = lease(&mut broker, "emails", 10).await;
    let by_key = |k: &str| leased.iter().find(|t| t.key == k).expect(k);
    let (one, five) = (by_key("jobs:1"), by_key("jobs:5"));
    assert_eq!((one.attempt, one.has_checkpoint), (1, true));
    assert_eq!(one.checkpoint, STATE);
    assert!(!five.has_checkpoint);
    assert!(five.checkpoint.is_empty());
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imports_a_mysql_task_table_once() {
    let Some(db) = MySqlDb::create().await else {
        return;
    };
    let pool = db.pool(1).await;
    sqlx::query(JOBS_MYSQL).execute(&pool).await.expect("jobs");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SET time_zone = '{TIME_ZONE}'"
    )))
    .execute(&pool)
    .await
    .expect("time zone");
    let now = now();
    for (id, kind, payload, priority, status, retry_count, at) in jobs(now) {
        sqlx::query(
            "INSERT INTO jobs (id, kind, payload, priority, status, retry_count, next_run_at) \
             VALUES (?, ?, ?, ?, ?, ?, FROM_UNIXTIME(?))",
        )
        .bind(id)
        .bind(kind)
        .bind(payload)
        .bind(priority)
        .bind(status)
        .bind(retry_count)
        .bind(at)
        .execute(&pool)
        .await
        .expect("insert");
    }
    sqlx::query("UPDATE jobs SET state = ? WHERE id = 1")
        .bind(STATE)
        .execute(&pool)
        .await
        .expect("state");
    pool.close().await;
    imports_the_table(&db.url, &["--time-zone", TIME_ZONE], now).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imports_a_postgres_task_table_once() {
    let Some(db) = test_db(Backend::Postgres).await else {
        return;
    };
    let pool = sqlx::PgPool::connect(&db.url).await.expect("connect");
    sqlx::query(JOBS_POSTGRES)
        .execute(&pool)
        .await
        .expect("jobs");
    let now = now();
    for (id, kind, payload, priority, status, retry_count, at) in jobs(now) {
        sqlx::query(
            "INSERT INTO jobs (id, kind, payload, priority, status, retry_count, next_run_at) \
             VALUES ($1, $2, $3::jsonb, $4, $5, $6, to_timestamp($7))",
        )
        .bind(id)
        .bind(kind)
        .bind(payload)
        .bind(priority)
        .bind(status)
        .bind(retry_count)
        .bind(at as f64)
        .execute(&pool)
        .await
        .expect("insert");
    }
    sqlx::query("UPDATE jobs SET state = $1 WHERE id = 1")
        .bind(STATE)
        .execute(&pool)
        .await
        .expect("state");
    pool.close().await;
    imports_the_table(&db.url, &[], now).await;
}
