//! The outbox (docs/outbox.md): `outbox::enqueue` in the producer's Postgres
//! transaction and the relay that ships committed rows to a real broker over gRPC,
//! with the broker on SQLite and on Postgres. The producer's database is always a
//! fresh Postgres database of the test cluster.

mod common;

use std::time::Duration;

use common::*;
use sqlx::PgPool;
use taskbroker_client::outbox::{self, Relay};
use taskbroker_client::{Client, TaskSpec, pb};

/// A fresh producer database with the outbox schema and an `orders` table.
async fn producer_db() -> Option<(TestDb, PgPool)> {
    let db = test_db(Backend::Postgres).await?;
    let pool = PgPool::connect(&db.url).await.expect("connect");
    outbox::init_schema(&pool).await.expect("outbox schema");
    // Applying it twice changes nothing (the relay's --init-schema runs at every start).
    outbox::init_schema(&pool)
        .await
        .expect("outbox schema again");
    sqlx::query("CREATE TABLE orders (id bigint PRIMARY KEY, total bigint NOT NULL)")
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

async fn tasks_in(app: &TestApp, queue: &str) -> Vec<pb::Task> {
    tasks_with_key(app, queue, "").await
}

async fn outbox_rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM taskbroker_outbox")
        .fetch_one(pool)
        .await
        .expect("count")
}

async fn relay_for(app: &TestApp, pool: &PgPool) -> Relay {
    let client = Client::connect(app.url()).await.expect("client");
    Relay::builder(pool.clone(), client).build()
}

async fn committed_becomes_one_task_and_rolled_back_none(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let Some((_db, pool)) = producer_db().await else {
        return;
    };
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO orders VALUES (1, 100)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let kept = outbox::enqueue(&mut tx, TaskSpec::new("emails", b"order 1".to_vec()))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO orders VALUES (2, 200)")
        .execute(&mut *tx)
        .await
        .unwrap();
    outbox::enqueue(&mut tx, TaskSpec::new("emails", b"order 2".to_vec()))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(kept.key.starts_with(outbox::KEY_PREFIX), "{}", kept.key);

    let report = relay_for(&app, &pool).await.run_once().await.unwrap();
    assert_eq!(
        (report.shipped, report.deduplicated, report.refused),
        (1, 0, 0)
    );
    let tasks = tasks_in(&app, "emails").await;
    assert_eq!(tasks.len(), 1, "one task, for the committed order only");
    assert_eq!(tasks[0].key, kept.key);
    assert_eq!(tasks[0].payload, b"order 1");
    assert_eq!(outbox_rows(&pool).await, 0, "shipped rows are deleted");

    // Nothing left: another pass ships nothing and makes nothing.
    let again = relay_for(&app, &pool).await.run_once().await.unwrap();
    assert_eq!(again.shipped, 0);
    assert_eq!(tasks_in(&app, "emails").await.len(), 1);
}

#[tokio::test]
async fn a_committed_row_becomes_one_task_and_a_rolled_back_one_none_sqlite() {
    committed_becomes_one_task_and_rolled_back_none(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_committed_row_becomes_one_task_and_a_rolled_back_one_none_postgres() {
    committed_becomes_one_task_and_rolled_back_none(Backend::Postgres).await;
}

/// The relay died after the broker's acknowledgement and before its delete: the
/// rows are shipped again and the broker answers with the first tasks.
async fn a_row_shipped_twice_is_one_task(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let Some((_db, pool)) = producer_db().await else {
        return;
    };
    let rows = outbox::enqueue_many(
        &mut pool.acquire().await.unwrap(),
        (0..3).map(|i| TaskSpec::new("redeliver", format!("p{i}").into_bytes())),
    )
    .await
    .unwrap();
    assert!(
        rows.windows(2).all(|w| w[0].id < w[1].id),
        "ids in input order"
    );
    // What the dead relay had submitted (same specs, same keys) before it died.
    let client = Client::connect(app.url()).await.unwrap();
    let first = client
        .submit_many(rows.iter().enumerate().map(|(i, r)| {
            TaskSpec::new("redeliver", format!("p{i}").into_bytes()).key(r.key.clone())
        }))
        .await
        .unwrap();

    let report = relay_for(&app, &pool).await.run_once().await.unwrap();
    assert_eq!((report.shipped, report.deduplicated), (3, 3));
    let tasks = tasks_in(&app, "redeliver").await;
    assert_eq!(tasks.len(), 3, "no second task for any row");
    let mut ids: Vec<_> = tasks.iter().map(|t| t.id.clone()).collect();
    let mut want: Vec<_> = first.iter().map(|s| s.task_id.clone()).collect();
    ids.sort();
    want.sort();
    assert_eq!(ids, want);
    assert_eq!(outbox_rows(&pool).await, 0);
}

#[tokio::test]
async fn a_row_shipped_twice_is_one_task_sqlite() {
    a_row_shipped_twice_is_one_task(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_row_shipped_twice_is_one_task_postgres() {
    a_row_shipped_twice_is_one_task(Backend::Postgres).await;
}

#[tokio::test]
async fn a_spec_with_its_own_key_is_submitted_under_it_and_two_rows_of_one_key_are_one_task() {
    let Some(app) = spawn_app(Backend::Sqlite).await else {
        return;
    };
    let Some((_db, pool)) = producer_db().await else {
        return;
    };
    let a = outbox::enqueue(
        &mut pool.acquire().await.unwrap(),
        TaskSpec::new("keyed", "a").key("order-7"),
    )
    .await
    .unwrap();
    let b = outbox::enqueue(
        &mut pool.acquire().await.unwrap(),
        TaskSpec::new("keyed", "b").key("order-7"),
    )
    .await
    .unwrap();
    assert_eq!((a.key.as_str(), b.key.as_str()), ("order-7", "order-7"));
    let report = relay_for(&app, &pool).await.run_once().await.unwrap();
    assert_eq!((report.shipped, report.deduplicated), (2, 1));
    let tasks = tasks_with_key(&app, "keyed", "order-7").await;
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].payload, b"a", "the first row wins, as with Submit");
}

#[tokio::test]
async fn a_spec_the_broker_cannot_take_is_refused_before_it_is_written() {
    let Some((_db, pool)) = producer_db().await else {
        return;
    };
    let mut tx = pool.begin().await.unwrap();
    let err = outbox::enqueue_many(
        &mut tx,
        [TaskSpec::new("ok", "x"), TaskSpec::new("bad queue", "x")],
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
        "nothing of the call was written"
    );
}

#[tokio::test]
async fn rows_the_broker_refuses_are_marked_and_do_not_hold_up_the_others() {
    let mut opts = Options::default();
    opts.settings.limits.max_payload_bytes = 8;
    let Some(app) = spawn_app_with(Backend::Sqlite, opts).await else {
        return;
    };
    let Some((_db, pool)) = producer_db().await else {
        return;
    };
    outbox::enqueue(
        &mut pool.acquire().await.unwrap(),
        TaskSpec::new("mixed", "first"),
    )
    .await
    .unwrap();
    // Not a TaskSpec at all (a hand-written INSERT gone wrong).
    sqlx::query("INSERT INTO taskbroker_outbox (spec) VALUES ('\\xffffffff'::bytea)")
        .execute(&pool)
        .await
        .unwrap();
    let big = outbox::enqueue(
        &mut pool.acquire().await.unwrap(),
        TaskSpec::new("mixed", "far over eight bytes"),
    )
    .await
    .unwrap();
    outbox::enqueue(
        &mut pool.acquire().await.unwrap(),
        TaskSpec::new("mixed", "last"),
    )
    .await
    .unwrap();

    let report = relay_for(&app, &pool).await.run_once().await.unwrap();
    assert_eq!((report.shipped, report.refused), (2, 2));
    let mut payloads: Vec<_> = tasks_in(&app, "mixed")
        .await
        .into_iter()
        .map(|t| t.payload)
        .collect();
    payloads.sort();
    assert_eq!(payloads, vec![b"first".to_vec(), b"last".to_vec()]);

    let refused: Vec<(i64, String, i32)> = sqlx::query_as(
        "SELECT id, last_error, attempts FROM taskbroker_outbox \
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
    assert_eq!(refused[1].0, big.id);
    assert!(
        refused[1].1.starts_with("RESOURCE_EXHAUSTED: tasks[") && refused[1].1.contains("payload"),
        "{refused:?}"
    );
    assert_eq!(refused[1].2, 1);
    // A marked row is not tried again.
    let again = relay_for(&app, &pool).await.run_once().await.unwrap();
    assert_eq!((again.shipped, again.refused), (0, 0));
}

#[tokio::test]
async fn the_relay_ships_on_notify_and_stops_when_asked() {
    let Some(app) = spawn_app(Backend::Sqlite).await else {
        return;
    };
    let Some((_db, pool)) = producer_db().await else {
        return;
    };
    let client = Client::connect(app.url()).await.unwrap();
    // An hour's poll: only the notification can make it ship within the test.
    let relay = Relay::builder(pool.clone(), client)
        .poll_interval(Duration::from_secs(3600))
        .build();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(async move {
        relay
            .run(async {
                let _ = stopped.await;
            })
            .await
    });
    // The relay LISTENs before its first drain; wait for the listening session.
    wait_for(
        || async {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND query LIKE 'LISTEN%'",
            )
            .fetch_one(&pool)
            .await
            .unwrap()
                > 0
        },
        "the relay to LISTEN",
    )
    .await;
    for round in 0..3 {
        let mut tx = pool.begin().await.unwrap();
        outbox::enqueue_many(
            &mut tx,
            (0..50).map(|i| TaskSpec::new("notify", format!("{round}-{i}").into_bytes())),
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        let want = 50 * (round + 1);
        wait_for(
            || async { tasks_count(&app, "notify").await == want },
            "the notified rows to become tasks",
        )
        .await;
    }
    // The rows are deleted after the broker's acknowledgement, so just after the
    // tasks are visible.
    wait_for(
        || async { outbox_rows(&pool).await == 0 },
        "the shipped rows to be deleted",
    )
    .await;
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(20), running)
        .await
        .expect("the relay stops")
        .unwrap()
        .unwrap();
}

async fn tasks_count(app: &TestApp, queue: &str) -> usize {
    let mut admin = app.admin().await;
    let stats = admin
        .get_queue_stats(pb::GetQueueStatsRequest {
            queues: vec![queue.into()],
        })
        .await
        .unwrap()
        .into_inner();
    stats
        .queues
        .first()
        .map(|s| (s.ready + s.scheduled + s.leased + s.succeeded + s.dead + s.cancelled) as usize)
        .unwrap_or(0)
}

/// Polls `f` every 20 ms for up to 20 s.
async fn wait_for<F, Fut>(mut f: F, what: &str)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    while !f().await {
        assert!(
            std::time::Instant::now() < give_up,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
async fn taskbroker_relay_once_creates_the_schema_and_ships_what_is_committed() {
    let Some(app) = spawn_app(Backend::Sqlite).await else {
        return;
    };
    // A database without the outbox table: --init-schema makes it.
    let Some(db) = test_db(Backend::Postgres).await else {
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
    let pool = PgPool::connect(&db.url).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    outbox::enqueue_many(
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
    assert_eq!(tasks_in(&app, "cli").await.len(), 3);
}

#[tokio::test]
async fn taskbroker_relay_says_in_one_line_what_is_wrong() {
    let bad_url = relay_cli(&["--source", "redis://x/y", "--once"]).await;
    assert!(!bad_url.status.success());
    let err = String::from_utf8_lossy(&bad_url.stderr);
    assert!(
        err.starts_with("taskbroker: --source must be a postgres:// or mysql:// URL")
            && err.trim().lines().count() == 1,
        "{err}"
    );
    // Nothing listens there: a one-line database error, not a panic.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let source = format!("postgres://nobody@127.0.0.1:{port}/none");
    let down = relay_cli(&["--source", &source, "--once"]).await;
    assert!(!down.status.success());
    let err = String::from_utf8_lossy(&down.stderr);
    assert!(
        err.starts_with("taskbroker: outbox database error") && err.trim().lines().count() == 1,
        "{err}"
    );
}

#[tokio::test]
async fn the_relay_counts_what_it_ships_and_serves_it_to_prometheus() {
    let mut opts = Options::default();
    opts.settings.limits.max_payload_bytes = 8;
    let Some(app) = spawn_app_with(Backend::Sqlite, opts).await else {
        return;
    };
    let Some((_db, pool)) = producer_db().await else {
        return;
    };
    let relay = relay_for(&app, &pool).await;
    let mut conn = pool.acquire().await.unwrap();
    outbox::enqueue(&mut conn, TaskSpec::new("m", "a").key("k"))
        .await
        .unwrap();
    outbox::enqueue(&mut conn, TaskSpec::new("m", "b").key("k"))
        .await
        .unwrap();
    outbox::enqueue(&mut conn, TaskSpec::new("m", "far too large"))
        .await
        .unwrap();
    relay.run_once().await.unwrap();
    // Waiting, not yet shipped: the oldest row's age is read at the scrape.
    outbox::enqueue(&mut conn, TaskSpec::new("m", "c"))
        .await
        .unwrap();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(outbox::serve_metrics(listener, relay.clone()));
    let scrape = |path: &'static str| async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    };
    let page = scrape("/metrics").await;
    assert!(page.starts_with("HTTP/1.1 200 OK\r\n"), "{page}");
    for line in [
        "taskbroker_relay_rows_shipped_total 2",
        "taskbroker_relay_rows_deduplicated_total 1",
        "taskbroker_relay_rows_refused_total 1",
        "taskbroker_relay_batches_total 1",
        "taskbroker_relay_batch_failures_total 0",
        "taskbroker_relay_source_up 1",
        "# TYPE taskbroker_relay_oldest_pending_seconds gauge",
    ] {
        assert!(page.lines().any(|l| l == line), "{line} missing in\n{page}");
    }
    let oldest: f64 = page
        .lines()
        .find_map(|l| l.strip_prefix("taskbroker_relay_oldest_pending_seconds "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(oldest >= 0.0);
    assert!(scrape("/other").await.starts_with("HTTP/1.1 404"));
    server.abort();
}

/// Rows no batch can carry (an index into the request names another
/// transaction's row; a fan-out row would need a key per copy) are refused
/// when written, and the relay refuses such a row written around `enqueue`
/// instead of shipping it with another row as its dependency.
#[tokio::test]
async fn rows_that_would_name_other_transactions_rows_are_refused() {
    let Some(app) = spawn_app(Backend::Sqlite).await else {
        return;
    };
    let Some((_db, pool)) = producer_db().await else {
        return;
    };
    let mut indexed = TaskSpec::new("flow", "second").into_proto();
    indexed.depends_on_index = vec![0];
    let mut copies = TaskSpec::new("flow", "copies").into_proto();
    copies.fanout = Some(pb::Fanout {
        copies: 3,
        distinct_workers: false,
    });
    let mut tx = pool.begin().await.unwrap();
    let err = outbox::enqueue_many(
        &mut tx,
        [
            TaskSpec::new("flow", "first"),
            TaskSpec::from(indexed.clone()),
        ],
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("specs[1].depends_on_index: cannot be used through the outbox"),
        "{err}"
    );
    let err = outbox::enqueue(&mut tx, TaskSpec::from(copies.clone()))
        .await
        .unwrap_err();
    assert!(
        err.to_string().starts_with("specs[0].fanout.copies"),
        "{err}"
    );
    tx.rollback().await.unwrap();

    // Two transactions, the second's row written by hand.
    outbox::enqueue(
        &mut pool.acquire().await.unwrap(),
        TaskSpec::new("flow", "other transaction"),
    )
    .await
    .unwrap();
    for spec in [&indexed, &copies] {
        sqlx::query("INSERT INTO taskbroker_outbox (spec) VALUES ($1)")
            .bind(prost::Message::encode_to_vec(spec))
            .execute(&pool)
            .await
            .unwrap();
    }
    let report = relay_for(&app, &pool).await.run_once().await.unwrap();
    assert_eq!((report.shipped, report.refused), (1, 2));
    let tasks = tasks_in(&app, "flow").await;
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].payload, b"other transaction".to_vec());
    let refused: Vec<String> = sqlx::query_scalar(
        "SELECT last_error FROM taskbroker_outbox WHERE failed_at IS NOT NULL ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(refused[0].starts_with("depends_on_index: "), "{refused:?}");
    assert!(refused[1].starts_with("fanout.copies: "), "{refused:?}");
}
