//! How database errors reach callers: a transaction the database rolled back to
//! break a deadlock stored nothing and may be sent again, so it is UNAVAILABLE
//! (retryable), not INTERNAL.

mod common;

use std::time::Duration;

use common::*;
use sqlx::Connection;
use taskbroker_server::store::StoreError;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_is_unavailable() {
    let Some(db) = test_db(Backend::Postgres).await else {
        return;
    };
    let mut a = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let mut b = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let mut watch = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut a).await.unwrap();
    sqlx::query("BEGIN").execute(&mut b).await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(1)")
        .execute(&mut a)
        .await
        .unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(2)")
        .execute(&mut b)
        .await
        .unwrap();
    let first = tokio::spawn(async move {
        let r = sqlx::query("SELECT pg_advisory_xact_lock(2)")
            .execute(&mut a)
            .await;
        (r, a)
    });
    // Wait until the first request waits for its lock, then close the cycle.
    let waiting = async {
        loop {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
            )
            .fetch_one(&mut watch)
            .await
            .unwrap();
            if n > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the first lock request waits");
    let second = sqlx::query("SELECT pg_advisory_xact_lock(1)")
        .execute(&mut b)
        .await;
    let (first, _a) = first.await.unwrap();
    // Postgres breaks the cycle by failing exactly one of the two.
    let failed: Vec<sqlx::Error> = [first.err(), second.err()].into_iter().flatten().collect();
    assert_eq!(failed.len(), 1, "one side of the deadlock fails");
    let e = failed.into_iter().next().unwrap();
    assert!(
        matches!(&e, sqlx::Error::Database(d) if d.code().as_deref() == Some("40P01")),
        "{e:?}"
    );
    assert!(
        matches!(StoreError::from(e), StoreError::Unavailable(_)),
        "a deadlock is retryable"
    );
}
