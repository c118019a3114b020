//! Retention deletes finished tasks (and their attempts) after their queue's
//! retention, frees their keys, and leaves unfinished tasks alone.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use taskbroker_client::pb;
use taskbroker_server::domain::RetryPolicy;
use taskbroker_server::maintenance::Retention;
use taskbroker_server::service::{QueueSettings, Settings};
use tonic::Code;

async fn finished_tasks_are_deleted_after_their_queue_retention(b: Backend) {
    let mut settings = Settings {
        retention: Duration::from_secs(3600),
        queues: HashMap::new(),
        ..Settings::default()
    };
    settings.queues.insert(
        "short".into(),
        QueueSettings {
            max_leases_per_worker: 0,
            retry: RetryPolicy::default(),
            max_payload_bytes: 1 << 20,
            min_lease: Duration::from_secs(1),
            max_lease: Duration::from_secs(3600),
            retention: Duration::from_secs(60),
        },
    );
    let Some(app) = spawn_app_with(
        b,
        Options {
            settings,
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let finish = async |c: &mut _, queue: &str| {
        let id = submit_one(
            c,
            pb::TaskSpec {
                key: format!("{queue}-key"),
                ..spec(queue)
            },
        )
        .await;
        let t = lease_one(c, queue).await;
        taskbroker_client::pb::broker_service_client::BrokerServiceClient::complete(
            c,
            pb::CompleteRequest {
                task_id: id.clone(),
                lease_token: t.lease_token,
                result: vec![],
                lease_next: None,
            },
        )
        .await
        .unwrap();
        id
    };
    let short = finish(&mut c, "short").await;
    let long = finish(&mut c, "long").await;
    let waiting = submit_one(&mut c, spec("short")).await;
    let retention = Retention::new(
        app.app.as_ref().unwrap().broker.clone(),
        Duration::from_secs(60),
    );

    app.advance(Duration::from_secs(61));
    assert_eq!(retention.run_once(app.clock.now_utc()).await.unwrap(), 1);
    let gone = admin
        .get_task(pb::GetTaskRequest {
            task_id: short.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    let attempts = admin
        .list_attempts(pb::ListAttemptsRequest { task_id: short })
        .await
        .unwrap_err();
    assert_eq!(attempts.code(), Code::NotFound);
    get(&mut admin, &long).await;
    get(&mut admin, &waiting).await;
    // The key is free again once its task is gone.
    let again = c
        .submit(pb::SubmitRequest {
            tasks: vec![pb::TaskSpec {
                key: "short-key".into(),
                ..spec("short")
            }],
        })
        .await
        .unwrap()
        .into_inner()
        .results;
    assert!(!again[0].deduplicated);

    app.advance(Duration::from_secs(3600));
    assert_eq!(
        retention.run_once(app.clock.now_utc()).await.unwrap(),
        1,
        "the long queue's task"
    );
    get(&mut admin, &waiting).await;
}

/// Rows of `task_deps` in the test's database.
async fn edges(url: &str) -> i64 {
    use sqlx::Connection;
    let sql = "SELECT COUNT(*) FROM task_deps";
    if url.starts_with("sqlite") {
        let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::query_scalar(sql).fetch_one(&mut c).await.unwrap()
    } else if url.starts_with("mysql") {
        let mut c = sqlx::MySqlConnection::connect(url).await.unwrap();
        sqlx::query_scalar(sql).fetch_one(&mut c).await.unwrap()
    } else {
        let mut c = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query_scalar(sql).fetch_one(&mut c).await.unwrap()
    }
}

/// A purged dependent takes its dependency edges with it; an edge stays while
/// its dependent does (GetTask shows it), even when the dependency is gone.
async fn purged_tasks_take_their_dependency_edges(b: Backend) {
    let Some(app) = spawn_app_with(
        b,
        Options {
            settings: Settings {
                retention: Duration::from_secs(60),
                ..Settings::default()
            },
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let mut second = spec("q");
    second.depends_on_index = vec![0];
    let mut third = spec("q");
    third.depends_on_index = vec![0, 1];
    let ids = submit(&mut c, vec![spec("q"), second, third]).await;
    assert_eq!(edges(&app.db.url).await, 3);
    let run = async |c: &mut _| {
        let t = lease_one(c, "q").await;
        taskbroker_client::pb::broker_service_client::BrokerServiceClient::complete(
            c,
            pb::CompleteRequest {
                task_id: t.task_id.clone(),
                lease_token: t.lease_token,
                result: vec![],
                lease_next: None,
            },
        )
        .await
        .unwrap();
        t.task_id
    };
    assert_eq!(run(&mut c).await, ids[0]);
    assert_eq!(run(&mut c).await, ids[1]);
    let retention = Retention::new(
        app.app.as_ref().unwrap().broker.clone(),
        Duration::from_secs(60),
    );
    app.advance(Duration::from_secs(61));
    assert_eq!(retention.run_once(app.clock.now_utc()).await.unwrap(), 2);
    // The second's edge went with it; the third still waits for nothing but
    // shows both of its dependencies.
    assert_eq!(edges(&app.db.url).await, 2);
    assert_eq!(get(&mut admin, &ids[2]).await.depends_on.len(), 2);
    assert_eq!(run(&mut c).await, ids[2]);
    app.advance(Duration::from_secs(61));
    assert_eq!(retention.run_once(app.clock.now_utc()).await.unwrap(), 1);
    assert_eq!(
        edges(&app.db.url).await,
        0,
        "edges whose both ends are purged"
    );
}

all_backends!(
    finished_tasks_are_deleted_after_their_queue_retention,
    purged_tasks_take_their_dependency_edges,
);
