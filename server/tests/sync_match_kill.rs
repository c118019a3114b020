//! Sync match and SIGKILL: a broker process killed right after a
//! Submit's sync-match commit (the producer holds its acknowledgement, the
//! worker may or may not have had its answer) loses nothing. The task is stored
//! LEASED to the waiting worker; after the restart its lease expires, the reaper
//! reclaims it, and it is leased again and completed.

mod common;
mod fault_harness;

use std::time::Duration;

use common::*;
use fault_harness::*;
use taskbroker_client::pb;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;

/// (state, attempt, created_at, leased_at) of a task, read from the database.
async fn stored(database_url: &str, id: &str) -> (String, i64, i64, Option<i64>) {
    let sql = "SELECT state, attempt, created_at, leased_at FROM tasks WHERE id = $1";
    if database_url.starts_with("postgres") {
        let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(database_url)
            .await
            .expect("connect");
        sqlx::query_as(sql)
            .bind(id)
            .fetch_one(&mut c)
            .await
            .expect("read the task")
    } else {
        sqlite(database_url)
            .query_row(&sql.replace("$1", "?1"), [id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .expect("read the task")
    }
}

fn waiting(worker: &str, wait: Duration) -> pb::LeaseRequest {
    pb::LeaseRequest {
        worker_id: worker.into(),
        queues: vec!["sk".into()],
        max_tasks: 1,
        lease_duration: dur(Duration::from_secs(1)),
        wait: dur(wait),
        labels: Default::default(),
    }
}

async fn a_broker_killed_right_after_a_sync_match_loses_nothing(b: Backend) {
    let Some(db) = test_db(b).await else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    // Sync match is opt-in on Postgres (and always on for SQLite).
    let on = ["--sync-match-postgres", "true"];
    let mut broker = Broker::start("sync-kill", logs.path(), &db.url, &on).await;
    // A worker waits on the queue; the task will be handed to it.
    let mut worker = BrokerServiceClient::new(channel(&broker.url()));
    let poll =
        tokio::spawn(async move { worker.lease(waiting("w1", Duration::from_secs(30))).await });
    let b1 = &broker;
    wait_until(
        "the long-poll waits",
        Duration::from_secs(30),
        || async move { b1.metrics().await.contains("taskbroker_lease_waiters 1") },
    )
    .await;
    let mut producer = BrokerServiceClient::new(channel(&broker.url()));
    let id = submit_one(&mut producer, spec("sk")).await;
    // Acknowledged: killed now, whether or not the worker got its answer.
    broker.kill9().await;
    let _ = poll.await;
    // Stored leased since its insert: the Submit's own commit leased it.
    let (state, attempt, created_at, leased_at) = stored(&db.url, &id).await;
    assert_eq!(state, "leased");
    assert_eq!(attempt, 1);
    assert_eq!(
        leased_at,
        Some(created_at),
        "inserted leased, in one commit"
    );

    // Restarted: the lease expires (1 s), is reclaimed, and leased again.
    broker.spawn().await;
    let mut worker = BrokerServiceClient::new(channel(&broker.url()));
    let give_up = std::time::Instant::now() + Duration::from_secs(60);
    let task = loop {
        assert!(std::time::Instant::now() < give_up, "the task came back");
        let got = worker
            .lease(waiting("w2", Duration::from_secs(5)))
            .await
            .expect("lease")
            .into_inner()
            .tasks;
        if let Some(t) = got.into_iter().next() {
            break t;
        }
    };
    assert_eq!(task.task_id, id);
    assert_eq!(task.attempt, 2);
    worker
        .complete(pb::CompleteRequest {
            task_id: id.clone(),
            lease_token: task.lease_token,
            ..Default::default()
        })
        .await
        .expect("complete");
    assert_eq!(stored(&db.url, &id).await.0, "succeeded");
    // The first attempt is on record as the expired lease of the killed broker's worker.
    let mut admin = taskbroker_client::pb::admin_service_client::AdminServiceClient::new(channel(
        &broker.url(),
    ));
    let attempts = admin
        .list_attempts(pb::ListAttemptsRequest {
            task_id: id.clone(),
        })
        .await
        .expect("attempts")
        .into_inner()
        .attempts;
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0].worker_id, "w1");
    assert_eq!(attempts[0].error, "lease expired");
    assert_eq!(attempts[1].worker_id, "w2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_broker_killed_right_after_a_sync_match_loses_nothing() {
    a_broker_killed_right_after_a_sync_match_loses_nothing(Backend::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_broker_killed_right_after_a_sync_match_loses_nothing() {
    a_broker_killed_right_after_a_sync_match_loses_nothing(Backend::Postgres).await
}
