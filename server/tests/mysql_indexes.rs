//! MySQL/MariaDB's task indexes (migration 0010). InnoDB writes a secondary
//! index entry again only when one of the index's columns changes, so what a
//! lease and a settle cost in index writes is the set of indexes that name a
//! column they write. The finished-task and fan-out indexes are built on
//! virtual columns that a lease leaves NULL (a fan-out copy's aside), and the
//! statements of the fold, the counts, retention and the distinct fan-out
//! routing read through them: the columns must follow each task.

mod common;

use common::*;
use sqlx::{Connection, MySqlConnection};
use taskbroker_client::pb;

async fn connect(url: &str) -> MySqlConnection {
    MySqlConnection::connect(url).await.expect("connect")
}

/// The task's `finished_state` and `fanout_leased_by`.
async fn columns(url: &str, id: &str) -> (Option<String>, Option<String>) {
    sqlx::query_as("SELECT finished_state, fanout_leased_by FROM tasks WHERE id = ?")
        .bind(id)
        .fetch_one(&mut connect(url).await)
        .await
        .expect("read the task's virtual columns")
}

/// The indexes of `tasks` that name any of `cols` (a virtual column counts as
/// the columns its expression reads: it changes only when they do).
async fn indexes_naming(url: &str, cols: &[&str]) -> Vec<String> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT index_name, column_name FROM information_schema.statistics \
         WHERE table_schema = DATABASE() AND table_name = 'tasks' \
         AND index_name <> 'PRIMARY'",
    )
    .fetch_all(&mut connect(url).await)
    .await
    .expect("read the indexes");
    let mut names: Vec<String> = rows
        .into_iter()
        .filter(|(_, c)| cols.iter().any(|w| w.eq_ignore_ascii_case(c)))
        .map(|(i, _)| i)
        .collect();
    names.sort();
    names.dedup();
    names
}

fn lease_as(queue: &str, worker: &str) -> pb::LeaseRequest {
    pb::LeaseRequest {
        worker_id: worker.into(),
        ..lease_req(queue, 1)
    }
}

#[tokio::test]
async fn the_indexes_a_lease_and_a_settle_write() {
    let Some(app) = spawn_app(Backend::Mysql).await else {
        return;
    };
    // The stored columns a lease writes, then a settle's.
    let lease = [
        "state",
        "attempt",
        "fencing_token",
        "lease_token",
        "leased_by",
        "lease_duration_ms",
        "lease_expires_at",
        "updated_at",
        "leased_at",
        "leased_address",
    ];
    let settle = [
        "state",
        "result",
        "finished_at",
        "lease_expires_at",
        "last_error",
        "run_at",
        "updated_at",
    ];
    assert_eq!(
        indexes_naming(&app.db.url, &lease).await,
        ["tasks_lease", "tasks_leased"]
    );
    assert_eq!(
        indexes_naming(&app.db.url, &settle).await,
        [
            "tasks_finished",
            "tasks_lease",
            "tasks_leased",
            "tasks_queue_state"
        ]
    );
    // The virtual columns, by what they are built on.
    assert_eq!(
        indexes_naming(&app.db.url, &["finished_state"]).await,
        ["tasks_finished", "tasks_queue_state"]
    );
    assert_eq!(
        indexes_naming(&app.db.url, &["fanout_leased_by"]).await,
        ["tasks_fanout"]
    );
    assert_eq!(
        indexes_naming(&app.db.url, &["keyed_state"]).await,
        ["tasks_leased_key"]
    );
    app.shutdown().await;
}

#[tokio::test]
async fn the_virtual_columns_follow_a_task_through_its_lease_and_settle() {
    let Some(app) = spawn_app(Backend::Mysql).await else {
        return;
    };
    let url = app.db.url.clone();
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let plain = submit_one(&mut c, spec("ix-plain")).await;
    submit_one(
        &mut c,
        pb::TaskSpec {
            fanout: Some(pb::Fanout {
                copies: 2,
                distinct_workers: true,
            }),
            ..spec("ix-fan")
        },
    )
    .await;
    let cancelled = submit_one(&mut c, spec("ix-cancel")).await;
    assert_eq!(columns(&url, &plain).await, (None, None));

    // A lease of a task of no fan-out group leaves both NULL.
    let t = lease_one(&mut c, "ix-plain").await;
    assert_eq!(columns(&url, &plain).await, (None, None));
    c.complete(pb::CompleteRequest {
        task_id: plain.clone(),
        lease_token: t.lease_token,
        ..Default::default()
    })
    .await
    .expect("complete");
    assert_eq!(
        columns(&url, &plain).await,
        (Some("succeeded".into()), None)
    );

    // A fan-out copy names its worker from its lease on.
    let copy = c
        .lease(lease_as("ix-fan", "w1"))
        .await
        .expect("lease")
        .into_inner()
        .tasks
        .remove(0);
    assert_eq!(
        columns(&url, &copy.task_id).await,
        (None, Some("w1".into()))
    );
    c.complete(pb::CompleteRequest {
        task_id: copy.task_id.clone(),
        lease_token: copy.lease_token,
        ..Default::default()
    })
    .await
    .expect("complete");
    assert_eq!(
        columns(&url, &copy.task_id).await,
        (Some("succeeded".into()), Some("w1".into()))
    );
    // w1 completed a copy of the distinct group: the other copy is w2's only.
    let again = c.lease(lease_as("ix-fan", "w1")).await.expect("lease");
    assert!(again.into_inner().tasks.is_empty());
    let other = c
        .lease(lease_as("ix-fan", "w2"))
        .await
        .expect("lease")
        .into_inner()
        .tasks;
    assert_eq!(other.len(), 1);
    assert_ne!(other[0].task_id, copy.task_id);

    // A failure past the budget and a cancel are finished states too.
    c.fail(pb::FailRequest {
        task_id: other[0].task_id.clone(),
        lease_token: other[0].lease_token.clone(),
        error_message: "boom".into(),
        non_retryable: true,
        ..Default::default()
    })
    .await
    .expect("fail");
    assert_eq!(
        columns(&url, &other[0].task_id).await,
        (Some("dead".into()), Some("w2".into()))
    );
    admin
        .cancel_task(pb::CancelTaskRequest {
            task_id: cancelled.clone(),
        })
        .await
        .expect("cancel");
    assert_eq!(
        columns(&url, &cancelled).await,
        (Some("cancelled".into()), None)
    );
    // A requeue takes the task out of the finished states.
    admin
        .requeue_task(pb::RequeueTaskRequest {
            task_id: cancelled.clone(),
        })
        .await
        .expect("requeue");
    assert_eq!(columns(&url, &cancelled).await, (None, None));
    app.shutdown().await;
}

/// The task's `keyed_state`.
async fn keyed_state(url: &str, id: &str) -> Option<String> {
    sqlx::query_scalar("SELECT keyed_state FROM tasks WHERE id = ?")
        .bind(id)
        .fetch_one(&mut connect(url).await)
        .await
        .expect("read the task's keyed state")
}

#[tokio::test]
async fn the_keyed_state_follows_a_task_with_a_concurrency_key_only() {
    let Some(app) = spawn_app(Backend::Mysql).await else {
        return;
    };
    let url = app.db.url.clone();
    let mut c = app.broker().await;
    let plain = submit_one(&mut c, spec("ix-keyed")).await;
    let keyed = submit_one(
        &mut c,
        pb::TaskSpec {
            concurrency_key: "k1".into(),
            ..spec("ix-keyed")
        },
    )
    .await;
    assert_eq!(keyed_state(&url, &plain).await, None);
    assert_eq!(keyed_state(&url, &keyed).await.as_deref(), Some("pending"));

    let leased = lease(&mut c, "ix-keyed", 2).await;
    assert_eq!(leased.len(), 2);
    assert_eq!(keyed_state(&url, &plain).await, None);
    assert_eq!(keyed_state(&url, &keyed).await.as_deref(), Some("leased"));
    for t in leased {
        c.complete(pb::CompleteRequest {
            task_id: t.task_id,
            lease_token: t.lease_token,
            ..Default::default()
        })
        .await
        .expect("complete");
    }
    assert_eq!(keyed_state(&url, &plain).await, None);
    assert_eq!(
        keyed_state(&url, &keyed).await.as_deref(),
        Some("succeeded")
    );
    app.shutdown().await;
}
