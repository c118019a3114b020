//! Moving a home-grown MySQL task table to taskbroker, as docs/migrating.md shows it:
//! the drain writes one outbox row per waiting row and marks the row moved in the same
//! transaction, the relay ships the outbox, and every waiting row becomes exactly one
//! task with its fields mapped. The drain is killed in the middle of a batch (its
//! connection dropped without a commit, which is what the server sees of a killed
//! process) and run again; rows drained twice (a drain run against a restored backup)
//! stay one task. Runs when TASKBROKER_TEST_MYSQL_URL names a server (scripts/mysql.sh).

mod common;
mod mysql_producer;

use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

use common::*;
use mysql_producer::MySqlDb;
use sqlx::{Connection, MySqlConnection, MySqlPool};
use taskbroker_client::outbox::{self, Relay};
use taskbroker_client::{Client, TaskSpec, pb};

/// The old table of docs/migrating.md, with the marker of step 2.
const JOBS: &str = "CREATE TABLE jobs (
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
  created_at   datetime     NOT NULL DEFAULT CURRENT_TIMESTAMP
)";

/// The application's sessions and the drain's run in this time zone (not UTC), so
/// the drain must read `next_run_at` as local time.
const TIME_ZONE: &str = "+02:00";

/// The batch size of the drain in docs/migrating.md (`LIMIT 500`).
const BATCH: usize = 500;

/// One row of the old table, as the test wrote it.
#[derive(Clone, Debug)]
struct Job {
    id: i64,
    kind: &'static str,
    payload: String,
    priority: i32,
    status: &'static str,
    retry_count: i32,
    max_retries: i32,
    /// `next_run_at` as a Unix time (whole seconds).
    next_run: i64,
}

impl Job {
    fn key(&self) -> String {
        format!("jobs:{}", self.id)
    }
}

/// Rows in every state: waiting and due, waiting after failed attempts, waiting for a
/// later time, held by the old scanner, done, failed for good.
fn fixture(now: i64) -> Vec<Job> {
    let mut jobs = Vec::new();
    for i in 0..(2 * BATCH as i64) {
        let (status, retry_count, next_run) = match i % 10 {
            // Retried before: two attempts used of 1 + 5.
            3 => ("pending", 2, now - 30),
            // Retries left, but its backoff has not passed: scheduled.
            4 => ("pending", 4, now + 3600),
            // Due later.
            5 => ("pending", 0, now + 86_400 + i),
            // Taken by the old scanner when it was stopped.
            6 => ("running", 1, now - 60),
            7 => ("done", 0, now - 600),
            // Retries exhausted.
            8 => ("failed", 5, now - 600),
            _ => ("pending", 0, now - 120 - i),
        };
        jobs.push(Job {
            id: i + 1,
            kind: if i % 2 == 0 { "emails" } else { "invoices" },
            payload: format!(r#"{{"n": {i}, "to": "user{i}@example.com"}}"#),
            priority: (i % 7) as i32 - 3,
            status,
            retry_count,
            max_retries: 5,
            next_run,
        });
    }
    jobs
}

/// A connection as the application's and the drain's: local time `TIME_ZONE`.
async fn session(url: &str) -> MySqlConnection {
    let mut conn = MySqlConnection::connect(url).await.expect("connect");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SET time_zone = '{TIME_ZONE}'"
    )))
    .execute(&mut conn)
    .await
    .expect("time zone");
    conn
}

/// `at` (Unix seconds) as a `datetime` literal in `TIME_ZONE`.
fn local(at: i64) -> String {
    let offset = chrono::FixedOffset::east_opt(2 * 3600).unwrap();
    chrono::DateTime::from_timestamp(at, 0)
        .unwrap()
        .with_timezone(&offset)
        .format("%Y-%m-%d %H:%M:%S")
        .to_string()
}

async fn write_jobs(conn: &mut MySqlConnection, jobs: &[Job]) {
    for chunk in jobs.chunks(100) {
        let mut q = sqlx::QueryBuilder::new(
            "INSERT INTO jobs (id, kind, payload, priority, status, retry_count, max_retries, \
             next_run_at, locked_by, locked_until) ",
        );
        q.push_values(chunk, |mut b, j| {
            let running = j.status == "running";
            b.push_bind(j.id)
                .push_bind(j.kind)
                .push_bind(&j.payload)
                .push_bind(j.priority)
                .push_bind(j.status)
                .push_bind(j.retry_count)
                .push_bind(j.max_retries)
                .push_bind(local(j.next_run))
                .push_bind(running.then_some("scanner-1"))
                .push_bind(running.then(|| local(j.next_run + 300)));
        });
        q.build().execute(&mut *conn).await.expect("insert jobs");
    }
}

/// One batch of the drain in docs/migrating.md, word for word but for `crash_after`:
/// with `Some(n)`, the drain dies after writing `n` rows of the batch (nothing
/// committed; the caller drops the connection). Returns the rows moved.
async fn drain_batch(conn: &mut MySqlConnection, crash_after: Option<usize>) -> Option<usize> {
    let mut tx = conn.begin().await.expect("begin");
    #[allow(clippy::type_complexity)]
    let rows: Vec<(i64, String, Vec<u8>, i32, i32, i32, i64)> = sqlx::query_as(
        "SELECT id, kind, CAST(payload AS BINARY), priority, retry_count, max_retries,
                CAST(UNIX_TIMESTAMP(next_run_at) AS SIGNED)
           FROM jobs WHERE status = 'pending' AND moved_at IS NULL
          ORDER BY id LIMIT 500 FOR UPDATE",
    )
    .fetch_all(&mut *tx)
    .await
    .expect("select the batch");
    let moved = rows.len();
    for (n, (id, kind, payload, priority, tries, max, next_run)) in rows.into_iter().enumerate() {
        if crash_after == Some(n) {
            return None;
        }
        let spec = TaskSpec::new(kind, payload)
            .key(format!("jobs:{id}")) // the same old row is always the same task
            .priority(priority)
            .run_at(UNIX_EPOCH + Duration::from_secs(next_run.max(0) as u64))
            .max_attempts((max - tries + 1).max(1) as u32);
        outbox::mysql::enqueue(&mut tx, spec)
            .await
            .expect("outbox row");
        sqlx::query("UPDATE jobs SET moved_at = UTC_TIMESTAMP() WHERE id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await
            .expect("mark moved");
    }
    tx.commit().await.expect("commit"); // the outbox rows and the marks, both or neither
    Some(moved)
}

/// Step 3: batches until one moves nothing. Returns the rows moved.
async fn drain(url: &str) -> usize {
    let mut conn = session(url).await;
    let mut total = 0;
    loop {
        match drain_batch(&mut conn, None).await.expect("no crash") {
            0 => return total,
            n => total += n,
        }
    }
}

async fn count(pool: &MySqlPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .expect("count")
}

async fn all_tasks(app: &TestApp, queue: &str) -> Vec<pb::Task> {
    let mut admin = app.admin().await;
    let mut tasks = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = admin
            .list_tasks(pb::ListTasksRequest {
                queue: queue.into(),
                page_size: 1000,
                page_token,
                ..Default::default()
            })
            .await
            .expect("list")
            .into_inner();
        tasks.extend(page.tasks);
        if page.next_page_token.is_empty() {
            return tasks;
        }
        page_token = page.next_page_token;
    }
}

#[tokio::test]
async fn a_mysql_task_table_drains_into_one_task_per_waiting_row_through_a_crash() {
    let Some(db) = MySqlDb::create().await else {
        return;
    };
    let Some(app) = spawn_app(Backend::Sqlite).await else {
        return;
    };
    let pool = db.pool(2).await;
    sqlx::query(JOBS).execute(&pool).await.expect("jobs table");
    outbox::mysql::init_schema(&pool)
        .await
        .expect("outbox schema");
    let now = chrono::Utc::now().timestamp();
    let mut jobs = fixture(now);
    write_jobs(&mut session(&db.url).await, &jobs).await;
    // Step 2: the marker.
    sqlx::query("ALTER TABLE jobs ADD COLUMN moved_at datetime NULL")
        .execute(&pool)
        .await
        .expect("marker");
    let waiting = jobs.iter().filter(|j| j.status == "pending").count();
    assert!(waiting > BATCH, "more than one batch waits");

    // Step 3, killed: the first batch commits, the second dies after 40 of its rows.
    let mut doomed = session(&db.url).await;
    assert_eq!(drain_batch(&mut doomed, None).await, Some(BATCH));
    assert_eq!(drain_batch(&mut doomed, Some(40)).await, None);
    drop(doomed);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM jobs WHERE moved_at IS NOT NULL"
        )
        .await,
        BATCH as i64,
        "the killed batch marked nothing"
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM taskbroker_outbox").await,
        BATCH as i64,
        "the killed batch wrote no outbox row"
    );
    // Run again: it takes the killed batch's rows (it waits for their locks, if the
    // server has not yet rolled the dead session back) and nothing committed before.
    assert_eq!(drain(&db.url).await, waiting - BATCH);
    let client = Client::connect(app.url()).await.expect("client");
    let relay = Relay::builder(pool.clone(), client).build();
    let shipped = relay.run_once().await.expect("relay");
    assert_eq!(
        (shipped.shipped, shipped.deduplicated, shipped.refused),
        (waiting as u64, 0, 0)
    );

    // Step 4: the rows the stopped scanner held go back to waiting, and drain.
    sqlx::query(
        "UPDATE jobs SET status = 'pending', locked_by = NULL, locked_until = NULL
          WHERE status = 'running'",
    )
    .execute(&pool)
    .await
    .expect("release the scanner's rows");
    let held = jobs.iter().filter(|j| j.status == "running").count();
    assert!(held > 0);
    assert_eq!(drain(&db.url).await, held);
    for j in &mut jobs {
        if j.status == "running" {
            j.status = "pending";
        }
    }

    // A drain run against a restored backup takes some rows again: they ship under the
    // same keys and make no new task.
    sqlx::query("UPDATE jobs SET moved_at = NULL WHERE id IN (1, 2, 4, 600)")
        .execute(&pool)
        .await
        .expect("restore");
    assert_eq!(drain(&db.url).await, 4);
    let again = relay.run_once().await.expect("relay");
    assert_eq!(
        (again.shipped, again.deduplicated, again.refused),
        (held as u64 + 4, 4, 0)
    );

    // The checks at the end of docs/migrating.md.
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM jobs WHERE status = 'pending' AND moved_at IS NULL"
        )
        .await,
        0
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM taskbroker_outbox").await,
        0
    );

    // Every waiting row is exactly one task, with its fields; done and failed rows
    // are none.
    let mut tasks: HashMap<String, Vec<pb::Task>> = HashMap::new();
    for queue in ["emails", "invoices"] {
        for t in all_tasks(&app, queue).await {
            assert_eq!(t.queue, queue);
            tasks.entry(t.key.clone()).or_default().push(t);
        }
    }
    let moved: Vec<&Job> = jobs.iter().filter(|j| j.status == "pending").collect();
    assert_eq!(
        tasks.len(),
        moved.len(),
        "one task per waiting row, no other"
    );
    for j in moved {
        let found = tasks.get(&j.key()).map_or(&[][..], Vec::as_slice);
        assert_eq!(found.len(), 1, "{}: {found:?}", j.key());
        let t = &found[0];
        assert_eq!(t.queue, j.kind, "{}", j.key());
        assert_eq!(t.payload, j.payload.as_bytes(), "{}", j.key());
        assert_eq!(t.priority, j.priority, "{}", j.key());
        assert_eq!(
            t.run_at.as_ref().map(|r| (r.seconds, r.nanos)),
            Some((j.next_run, 0)),
            "{}: run_at is next_run_at read in the session's time zone",
            j.key()
        );
        assert_eq!(
            t.max_attempts,
            (j.max_retries - j.retry_count + 1) as u32,
            "{}",
            j.key()
        );
        assert_eq!(t.attempt, 0, "{}", j.key());
        let want = if j.next_run > now + 60 {
            pb::TaskState::Scheduled
        } else {
            pb::TaskState::Ready
        };
        assert_eq!(t.state(), want, "{}", j.key());
    }
}
