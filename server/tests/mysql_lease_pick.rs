//! MySQL/MariaDB's lease reads its candidates by a consistent read, then locks
//! them by primary key, skipping those another transaction holds. A lease must
//! still take the next READY tasks in lease order past the ones it skips, as a
//! locking scan of the queue would.

mod common;

use common::*;
use sqlx::{Connection, MySqlConnection};

/// Holds the first `n` of the queue's tasks in seq order under a row lock, in
/// a transaction left open until the connection is dropped or rolled back.
/// Only those rows: they are locked by primary key, at READ COMMITTED (a range
/// read under REPEATABLE READ locks every row and gap it passes).
async fn hold_first(url: &str, queue: &str, n: i64) -> MySqlConnection {
    let mut conn = MySqlConnection::connect(url).await.expect("connect");
    let seqs: Vec<i64> =
        sqlx::query_scalar("SELECT seq FROM tasks WHERE queue = ? ORDER BY seq LIMIT ?")
            .bind(queue)
            .bind(n)
            .fetch_all(&mut conn)
            .await
            .expect("read the first tasks");
    assert_eq!(seqs.len() as i64, n);
    for q in [
        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        "BEGIN",
    ] {
        sqlx::query(q).execute(&mut conn).await.expect(q);
    }
    for seq in seqs {
        let held: Option<i64> =
            sqlx::query_scalar("SELECT seq FROM tasks WHERE seq = ? FOR UPDATE")
                .bind(seq)
                .fetch_optional(&mut conn)
                .await
                .expect("lock a task");
        assert_eq!(held, Some(seq));
    }
    conn
}

fn ids_of(tasks: &[taskbroker_client::pb::LeasedTask]) -> Vec<String> {
    tasks.iter().map(|t| t.task_id.clone()).collect()
}

#[tokio::test]
async fn a_lease_passes_over_tasks_another_transaction_holds() {
    let Some(app) = spawn_app(Backend::Mysql).await else {
        return;
    };
    let mut c = app.broker().await;
    let ids = submit(&mut c, (0..8).map(|_| spec("pick-held")).collect()).await;

    let mut holder = hold_first(&app.db.url, "pick-held", 3).await;
    // The first five candidates hold three locked ones: the lease reads on.
    let got = lease(&mut c, "pick-held", 5).await;
    assert_eq!(ids_of(&got), ids[3..8].to_vec());

    // Once the holder lets go, the three are READY again and come next.
    sqlx::query("ROLLBACK")
        .execute(&mut holder)
        .await
        .expect("rollback");
    let got = lease(&mut c, "pick-held", 5).await;
    assert_eq!(ids_of(&got), ids[0..3].to_vec());
    app.shutdown().await;
}

#[tokio::test]
async fn a_lease_of_one_reads_past_more_held_tasks_than_its_window() {
    let Some(app) = spawn_app(Backend::Mysql).await else {
        return;
    };
    let mut c = app.broker().await;
    let ids = submit(&mut c, (0..20).map(|_| spec("pick-many")).collect()).await;

    // The first window (the request and eight more) is all held: the next,
    // twice as wide, reaches past the twelve held tasks.
    let _holder = hold_first(&app.db.url, "pick-many", 12).await;
    let got = lease(&mut c, "pick-many", 1).await;
    assert_eq!(ids_of(&got), vec![ids[12].clone()]);
    app.shutdown().await;
}

#[tokio::test]
async fn a_lease_takes_nothing_held_and_nothing_twice() {
    let Some(app) = spawn_app(Backend::Mysql).await else {
        return;
    };
    let mut c = app.broker().await;
    let ids = submit(&mut c, (0..4).map(|_| spec("pick-all")).collect()).await;

    // Every task is held: the lease answers with none rather than wait.
    let mut holder = hold_first(&app.db.url, "pick-all", 4).await;
    assert!(lease(&mut c, "pick-all", 4).await.is_empty());
    sqlx::query("ROLLBACK")
        .execute(&mut holder)
        .await
        .expect("rollback");

    // A request larger than the queue takes each task once.
    let got = lease(&mut c, "pick-all", 100).await;
    assert_eq!(ids_of(&got), ids);
    assert!(lease(&mut c, "pick-all", 100).await.is_empty());
    app.shutdown().await;
}
