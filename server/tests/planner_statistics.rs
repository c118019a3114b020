//! Planner statistics of the task table on Postgres. The hot statements keep one
//! generic plan per connection, made on the statistics of the moment: statistics
//! that call the table empty while it holds thousands of rows give a lease plan
//! that reads the whole table per lease. A fresh database is left "never
//! analyzed" (the planner then assumes a table of some size), and the broker
//! analyzes the table when it holds several times the rows its statistics say.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::*;
use taskbroker_server::domain::RetryPolicy;
use taskbroker_server::store::{self, NewTask};

fn task(n: usize, now: DateTime<Utc>) -> NewTask {
    NewTask {
        id: format!("00000000-0000-7000-8000-{n:012}"),
        queue: "q".into(),
        key: None,
        payload: n.to_string().into_bytes(),
        priority: 0,
        run_at: now,
        deadline: None,
        retry: RetryPolicy::default(),
        metadata: BTreeMap::new(),
        routing: Default::default(),
        concurrency_key: None,
        checkpoint: None,
    }
}

async fn reltuples(conn: &mut sqlx::PgConnection) -> f32 {
    sqlx::query_scalar("SELECT reltuples FROM pg_class WHERE oid = 'tasks'::regclass")
        .fetch_one(conn)
        .await
        .expect("read reltuples")
}

#[tokio::test]
async fn a_fresh_database_is_not_recorded_as_empty() {
    let Some(db) = test_db(Backend::Postgres).await else {
        return;
    };
    let s = store::connect(&db.url, 8).await.expect("connect");
    s.migrate().await.expect("migrate");
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&db.url)
        .await
        .expect("connect");
    // -1: never analyzed. 0 would be "analyzed, empty", which cached plans trust.
    assert_eq!(reltuples(&mut conn).await, -1.0);
    // With tasks in the table, migrating again keeps its statistics.
    let now = Utc::now();
    s.task_insert_many(&[task(1, now)], now)
        .await
        .expect("insert");
    sqlx::query("ANALYZE tasks")
        .execute(&mut conn)
        .await
        .unwrap();
    s.migrate().await.expect("migrate again");
    assert_eq!(reltuples(&mut conn).await, 1.0);
    s.close().await;
}

#[tokio::test]
async fn statistics_far_behind_the_table_are_refreshed_once() {
    let Some(db) = test_db(Backend::Postgres).await else {
        return;
    };
    let s = store::connect(&db.url, 8).await.expect("connect");
    s.migrate().await.expect("migrate");
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&db.url)
        .await
        .expect("connect");
    // An emptied table, analyzed: what a purge and autovacuum leave behind.
    sqlx::query("ANALYZE tasks")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(reltuples(&mut conn).await, 0.0);
    assert!(
        !s.statistics_refresh().await.expect("check"),
        "nothing to refresh yet"
    );
    let now = Utc::now();
    for chunk in (0..3000).collect::<Vec<_>>().chunks(500) {
        let tasks: Vec<NewTask> = chunk.iter().map(|&n| task(n, now)).collect();
        s.task_insert_many(&tasks, now).await.expect("insert");
    }
    // The inserting backends report their rows to the statistics collector when
    // they go idle, at most once a second; wait for the report.
    let reported = async {
        loop {
            let live: i64 = sqlx::query_scalar(
                "SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'tasks'",
            )
            .fetch_one(&mut conn)
            .await
            .expect("read n_live_tup");
            if live >= 3000 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), reported)
        .await
        .expect("the collector saw the inserts");
    assert!(
        s.statistics_refresh().await.expect("refresh"),
        "stale statistics refreshed"
    );
    assert_eq!(reltuples(&mut conn).await, 3000.0);
    assert!(
        !s.statistics_refresh().await.expect("check"),
        "fresh statistics kept"
    );
    s.close().await;
}
