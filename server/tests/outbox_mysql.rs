//! The outbox in a producer's MySQL/MariaDB (docs/outbox.md): `outbox::mysql::enqueue`
//! in the producer's transaction and the relay that ships committed rows from it to a
//! real broker over gRPC. Runs when TASKBROKER_TEST_MYSQL_URL names a server
//! (scripts/mysql.sh), each test in a fresh database of it.

mod common;
mod mysql_producer;

use common::*;
use mysql_producer::MySqlDb;
use sqlx::MySqlPool;
use taskbroker_client::outbox::{self, Relay};
use taskbroker_client::{Client, TaskSpec, pb};

/// A fresh producer database with the outbox schema and an `orders` table.
async fn producer_db() -> Option<(MySqlDb, MySqlPool)> {
    let db = MySqlDb::create().await?;
    let pool = db.pool(4).await;
    outbox::mysql::init_schema(&pool)
        .await
        .expect("outbox schema");
    // Applying it twice changes nothing (the relay's --init-schema runs at every start).
    outbox::mysql::init_schema(&pool)
        .await
        .expect("outbox schema again");
    sqlx::query(
        "CREATE TABLE orders (id bigint PRIMARY KEY, total bigint NOT NULL) ENGINE = InnoDB",
    )
    .execute(&pool)
    .await
    .expect("orders");
    Some((db, pool))
}

async fn tasks_with_key(app: &TestApp, queue: &str, key: &str) -> Vec<pb::Task> {
    let mut admin = app.admin().await;
    admin
        .list_tasks(pb::ListTasksRequest {
            queue: queue.into(),
            key: key.into(),
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner()
        .tasks
}

async fn outbox_rows(pool: &MySqlPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM taskbroker_outbox")
        .fetch_one(pool)
        .await
        .expect("count")
}

async fn relay_for(app: &TestApp, pool: &MySqlPool) -> Relay {
    let client = Client::connect(app.url()).await.expect("client");
    Relay::builder(pool.clone(), client).build()
}

#[tokio::test]
async fn a_committed_mysql_row_becomes_one_task_and_a_rolled_back_one_none() {
    let Some((_db, pool)) = producer_db().await else {
        return;
    };
    let Some(app) = spawn_app(Backend::Sqlite).await else {
        return;
    };
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO orders VALUES (1, 100)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let kept = outbox::mysql::enqueue(&mut tx, TaskSpec::new("emails", b"order 1".to_vec()))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO orders VALUES (2, 200)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let dropped = outbox::mysql::enqueue(&mut tx, TaskSpec::new("emails", b"order 2".to_vec()))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(kept.key.starts_with(outbox::KEY_PREFIX), "{}", kept.key);
    assert_ne!(kept.key, dropped.key);
    assert_eq!(outbox_rows(&pool).await, 1);

    let report = relay_for(&app, &pool).await.run_once().await.unwrap();
    assert_eq!((report.shipped, report.refused), (1, 0));
    assert_eq!(outbox_rows(&pool).await, 0, "shipped rows are deleted");
    let tasks = tasks_with_key(&app, "emails", "").await;
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].payload, b"order 1");
    assert_eq!(tasks_with_key(&app, "emails", &kept.key).await.len(), 1);
    assert!(
        tasks_with_key(&app, "emails", &dropped.key)
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn mysql_rows_keep_their_order_and_a_row_shipped_twice_is_one_task() {
    let Some((_db, pool)) = producer_db().await else {
        return;
    };
    let Some(app) = spawn_app(Backend::Sqlite).await else {
        return;
    };
    let mut tx = pool.begin().await.unwrap();
    let rows = outbox::mysql::enqueue_many(
        &mut tx,
        (0..5).map(|i| TaskSpec::new("many", format!("{i}").into_bytes())),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(rows.len(), 5);
    assert!(rows.windows(2).all(|w| w[0].id < w[1].id), "{rows:?}");
    let stored: Vec<(i64, String)> =
        sqlx::query_as("SELECT id, idempotency_key FROM taskbroker_outbox ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    let written: Vec<(i64, String)> = rows.iter().map(|r| (r.id, r.key.clone())).collect();
    assert_eq!(stored, written, "the ids and keys returned are the rows'");

    // A relay that died after the broker's acknowledgement and before its delete:
    // the same rows go again, under the same keys, and make no new tasks.
    let keep: Vec<(i64, String, Vec<u8>)> =
        sqlx::query_as("SELECT id, idempotency_key, spec FROM taskbroker_outbox ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    let first = relay_for(&app, &pool).await.run_once().await.unwrap();
    assert_eq!((first.shipped, first.deduplicated), (5, 0));
    for (id, key, spec) in &keep {
        sqlx::query("INSERT INTO taskbroker_outbox (id, idempotency_key, spec) VALUES (?, ?, ?)")
            .bind(id)
            .bind(key)
            .bind(spec)
            .execute(&pool)
            .await
            .unwrap();
    }
    let again = relay_for(&app, &pool).await.run_once().await.unwrap();
    assert_eq!((again.shipped, again.deduplicated), (5, 5));
    let mut payloads: Vec<_> = tasks_with_key(&app, "many", "")
        .await
        .into_iter()
        .map(|t| t.payload)
        .collect();
    payloads.sort();
    let want: Vec<Vec<u8>> = (0..5).map(|i| format!("{i}").into_bytes()).collect();
    assert_eq!(payloads, want);
}

#[tokio::test]
async fn a_spec_the_broker_cannot_take_is_refused_before_a_mysql_row_is_written() {
    let Some((_db, pool)) = producer_db().await else {
        return;
    };
    let mut tx = pool.begin().await.unwrap();
    let err = outbox::mysql::enqueue_many(
        &mut tx,
        [TaskSpec::new("fine", "x"), TaskSpec::new("has space", "x")],
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "specs[1].queue: may only contain A-Z a-z 0-9 . _ : -"
    );
    tx.commit().await.unwrap();
    assert_eq!(
        outbox_rows(&pool).await,
        0,
        "nothing of the batch is written"
    );
}

#[tokio::test]
async fn mysql_rows_the_broker_refuses_are_marked_and_do_not_hold_up_the_others() {
    let mut opts = Options::default();
    opts.settings.limits.max_payload_bytes = 8;
    let Some((_db, pool)) = producer_db().await else {
        return;
    };
    let Some(app) = spawn_app_with(Backend::Sqlite, opts).await else {
        return;
    };
    let mut conn = pool.acquire().await.unwrap();
    outbox::mysql::enqueue(&mut conn, TaskSpec::new("mixed", "first"))
        .await
        .unwrap();
    // Not a TaskSpec at all (a hand-written INSERT gone wrong); its key is the default.
    sqlx::query("INSERT INTO taskbroker_outbox (spec) VALUES (X'ffffffff')")
        .execute(&mut *conn)
        .await
        .unwrap();
    let big = outbox::mysql::enqueue(&mut conn, TaskSpec::new("mixed", "far over eight bytes"))
        .await
        .unwrap();
    outbox::mysql::enqueue(&mut conn, TaskSpec::new("mixed", "last"))
        .await
        .unwrap();
    drop(conn);

    let relay = relay_for(&app, &pool).await;
    let report = relay.run_once().await.unwrap();
    assert_eq!((report.shipped, report.refused), (2, 2));
    let mut payloads: Vec<_> = tasks_with_key(&app, "mixed", "")
        .await
        .into_iter()
        .map(|t| t.payload)
        .collect();
    payloads.sort();
    assert_eq!(payloads, vec![b"first".to_vec(), b"last".to_vec()]);

    let refused: Vec<(i64, String, i32, String)> = sqlx::query_as(
        "SELECT id, last_error, attempts, idempotency_key FROM taskbroker_outbox \
         WHERE failed_at IS NOT NULL ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(
        refused[0]
            .1
            .starts_with("spec is not a taskbroker.v1.TaskSpec"),
        "{refused:?}"
    );
    assert!(
        refused[0].3.starts_with("outbox:"),
        "the default key: {refused:?}"
    );
    assert_eq!(refused[1].0, big.id);
    assert!(refused[1].1.contains("payload"), "{refused:?}");
    assert_eq!(refused[1].2, 1);
    let again = relay.run_once().await.unwrap();
    assert_eq!((again.shipped, again.refused), (0, 0));
    // Refused rows wait no more: the gauge counts only rows still to ship.
    let metrics = relay.metrics_text().await;
    assert!(
        metrics.contains("taskbroker_relay_source_up 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("taskbroker_relay_oldest_pending_seconds 0.000"),
        "{metrics}"
    );
}

#[tokio::test]
async fn two_mysql_relays_at_once_ship_every_row_once() {
    let Some((_db, pool)) = producer_db().await else {
        return;
    };
    let Some(app) = spawn_app(Backend::Sqlite).await else {
        return;
    };
    let mut tx = pool.begin().await.unwrap();
    outbox::mysql::enqueue_many(
        &mut tx,
        (0..300).map(|i| TaskSpec::new("pair", format!("{i}").into_bytes())),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let client = Client::connect(app.url()).await.unwrap();
    let a = Relay::builder(pool.clone(), client.clone())
        .batch_size(7)
        .build();
    let b = Relay::builder(pool.clone(), client).batch_size(7).build();
    let (ra, rb) = tokio::join!(a.run_once(), b.run_once());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    // Each row is deleted by one relay's committed batch. A batch InnoDB rolled back
    // as a deadlock's victim after its Submit leaves its rows to be shipped again
    // under the same keys (counted as deduplicated), which makes no new task.
    assert_eq!(ra.shipped + rb.shipped, 300, "{ra:?} {rb:?}");
    let mut admin = app.admin().await;
    let stats = admin
        .get_queue_stats(pb::GetQueueStatsRequest {
            queues: vec!["pair".into()],
        })
        .await
        .unwrap()
        .into_inner();
    let s = &stats.queues[0];
    assert_eq!(
        s.ready + s.scheduled + s.leased + s.succeeded + s.dead + s.cancelled,
        300
    );
    assert_eq!(outbox_rows(&pool).await, 0);
}

async fn relay_cli(args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_taskbroker"))
        .arg("relay")
        .args(args)
        .env_remove("TASKBROKER_TOKEN")
        .output()
        .await
        .expect("run taskbroker relay")
}

#[tokio::test]
async fn taskbroker_relay_once_creates_the_mysql_schema_and_ships_what_is_committed() {
    // A database without the outbox table: --init-schema makes it.
    let Some(db) = MySqlDb::create().await else {
        return;
    };
    let Some(app) = spawn_app(Backend::Sqlite).await else {
        return;
    };
    let url = app.url();
    let first = relay_cli(&[
        "--source",
        &db.url,
        "--addr",
        &url,
        "--init-schema",
        "--once",
    ])
    .await;
    assert!(first.status.success(), "{first:?}");
    assert_eq!(
        String::from_utf8_lossy(&first.stdout),
        "shipped 0 rows (0 already at the broker), refused 0\n"
    );
    let pool = db.pool(2).await;
    let mut tx = pool.begin().await.unwrap();
    outbox::mysql::enqueue_many(
        &mut tx,
        (0..3).map(|i| TaskSpec::new("cli", format!("{i}").into_bytes())),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let second = relay_cli(&["--source", &db.url, "--addr", &url, "--once"]).await;
    assert!(second.status.success(), "{second:?}");
    assert_eq!(
        String::from_utf8_lossy(&second.stdout),
        "shipped 3 rows (0 already at the broker), refused 0\n"
    );
    assert_eq!(tasks_with_key(&app, "cli", "").await.len(), 3);
}
