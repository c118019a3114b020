//! The work one Submit may cause is bounded after expansion, on SQLite and
//! Postgres: fan-out copies, the dependency edges between copies and the bytes
//! every copy stores are counted before anything is cloned; repeated
//! dependencies are one edge; a refused call stores nothing; a call whose
//! deadline passes before its commit rolls back and says so.

mod common;

use std::time::Duration;

use common::*;
use taskbroker_client::pb;
use tonic::Code;

fn fanout(queue: &str, copies: u32) -> pb::TaskSpec {
    pb::TaskSpec {
        fanout: Some(pb::Fanout {
            copies,
            distinct_workers: false,
        }),
        ..spec(queue)
    }
}

async fn count(
    admin: &mut pb::admin_service_client::AdminServiceClient<tonic::transport::Channel>,
    queue: &str,
) -> usize {
    admin
        .list_tasks(pb::ListTasksRequest {
            queue: queue.into(),
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tasks
        .len()
}

/// Each refused request names its field and leaves the queue empty.
async fn limits_apply_after_expansion(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let refused = async |c: &mut pb::broker_service_client::BrokerServiceClient<_>,
                         tasks: Vec<pb::TaskSpec>| {
        c.submit(pb::SubmitRequest { tasks }).await.unwrap_err()
    };

    // The hostile 1 KB request: 500 copies each waiting for 1,000 x 500 copies.
    let mut join = fanout("q", 500);
    join.depends_on_index = vec![0; 1000];
    let e = refused(&mut c, vec![fanout("q", 500), join]).await;
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert_eq!(bad_field(&e).as_deref(), Some("tasks[1].depends_on_index"));

    // 100 copies each waiting for 200 copies: 20,000 edges, over 10,000.
    let mut join = fanout("q", 100);
    join.depends_on_index = vec![0];
    let e = refused(&mut c, vec![fanout("q", 200), join]).await;
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(bad_field(&e).as_deref(), Some("tasks[1].depends_on_index"));
    assert!(e.message().contains("10000"), "{}", e.message());

    // One task waiting for 500 ids and 600 copies: 1,100 dependencies.
    let existing = submit_one(&mut c, spec("other")).await;
    let mut join = spec("q");
    join.depends_on = vec![existing.clone(); 1];
    join.depends_on.extend((0..499).map(|n| format!("id-{n}")));
    join.depends_on_index = vec![0];
    let e = refused(&mut c, vec![fanout("q", 600), join]).await;
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(bad_field(&e).as_deref(), Some("tasks[1].depends_on_index"));

    // 9 copies of a 1 MiB payload: 9 MiB stored, over 8.
    let big = pb::TaskSpec {
        payload: vec![7; 1 << 20],
        ..fanout("q", 9)
    };
    let e = refused(&mut c, vec![big]).await;
    assert_eq!(e.code(), Code::ResourceExhausted);
    assert_eq!(bad_field(&e).as_deref(), Some("tasks[0]"));

    // More than 1,000 tasks, copies counted.
    let e = refused(&mut c, vec![fanout("q", 1000), spec("q")]).await;
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(bad_field(&e).as_deref(), Some("tasks"));

    assert_eq!(
        count(&mut admin, "q").await,
        0,
        "a refused call stores nothing"
    );
}

/// The largest requests the limits allow are accepted whole.
async fn the_largest_allowed_requests_are_accepted(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    // 100 copies each waiting for 100 copies: exactly 10,000 edges.
    let mut join = fanout("edges", 100);
    join.depends_on_index = vec![0];
    let r = c
        .submit(pb::SubmitRequest {
            tasks: vec![fanout("edges", 100), join],
        })
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(r[1].copy_task_ids.len(), 100);
    let t = get(&mut admin, &r[1].copy_task_ids[99]).await;
    assert_eq!(t.depends_on.len(), 100);
    assert_eq!(state(&t), pb::TaskState::Blocked);
    // 8 copies of 1 MiB less the queue name: under 8 MiB.
    let big = pb::TaskSpec {
        payload: vec![7; (1 << 20) - 8],
        ..fanout("bytes", 8)
    };
    let r = c
        .submit(pb::SubmitRequest { tasks: vec![big] })
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(r[0].copy_task_ids.len(), 8);
    assert_eq!(
        get(&mut admin, &r[0].copy_task_ids[7]).await.payload.len(),
        (1 << 20) - 8
    );
}

/// The same dependency named many times is one edge, and an unknown id is
/// named at its place in the request.
async fn repeated_dependencies_are_one_edge(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let existing = submit_one(&mut c, spec("other")).await;
    // 999 copies named 1,000 times by one task: 999 edges, not 999,000.
    let mut join = spec("q");
    join.depends_on_index = vec![0; 999];
    join.depends_on = vec![existing.clone(); 1];
    let r = c
        .submit(pb::SubmitRequest {
            tasks: vec![fanout("q", 999), join],
        })
        .await
        .unwrap()
        .into_inner()
        .results;
    let t = get(&mut admin, &r[1].task_id).await;
    assert_eq!(t.depends_on.len(), 1000);
    assert_eq!(t.dependencies_remaining, 1000);

    let mut bad = spec("q2");
    bad.depends_on = vec![existing.clone(), existing.clone(), existing, "nope".into()];
    let e = c
        .submit(pb::SubmitRequest { tasks: vec![bad] })
        .await
        .unwrap_err();
    assert_eq!(bad_field(&e).as_deref(), Some("tasks[0].depends_on[3]"));
    assert_eq!(count(&mut admin, "q2").await, 0);
}

/// Holds the database's write lock (SQLite) or the dependency's row lock
/// (Postgres, MySQL) so the Submit's insert waits past its deadline.
enum Hold {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
    Mysql(sqlx::MySqlConnection),
}

impl Hold {
    async fn take(url: &str, dep: &str) -> Hold {
        use sqlx::Connection;
        if url.starts_with("sqlite") {
            let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
            sqlx::query("BEGIN IMMEDIATE")
                .execute(&mut c)
                .await
                .unwrap();
            Hold::Sqlite(c)
        } else if url.starts_with("mysql") {
            let mut c = sqlx::MySqlConnection::connect(url).await.unwrap();
            sqlx::query("BEGIN").execute(&mut c).await.unwrap();
            sqlx::query("SELECT 1 FROM tasks WHERE id = ? FOR UPDATE")
                .bind(dep)
                .execute(&mut c)
                .await
                .unwrap();
            Hold::Mysql(c)
        } else {
            let mut c = sqlx::PgConnection::connect(url).await.unwrap();
            sqlx::query("BEGIN").execute(&mut c).await.unwrap();
            sqlx::query("SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE")
                .bind(dep)
                .execute(&mut c)
                .await
                .unwrap();
            Hold::Postgres(c)
        }
    }

    /// Lets the waiting insert go on, and returns once it has ended.
    async fn release(self, dep: &str) {
        match self {
            Hold::Sqlite(mut c) => {
                sqlx::query("COMMIT").execute(&mut c).await.unwrap();
            }
            Hold::Mysql(mut c) => {
                sqlx::query("COMMIT").execute(&mut c).await.unwrap();
                // The insert locks the dependency next: this waits until its
                // transaction ended.
                sqlx::query("BEGIN").execute(&mut c).await.unwrap();
                sqlx::query("SELECT 1 FROM tasks WHERE id = ? FOR UPDATE")
                    .bind(dep)
                    .execute(&mut c)
                    .await
                    .unwrap();
                sqlx::query("COMMIT").execute(&mut c).await.unwrap();
            }
            Hold::Postgres(mut c) => {
                sqlx::query("COMMIT").execute(&mut c).await.unwrap();
                // The insert locks the dependency next: this waits until its
                // transaction ended.
                sqlx::query("BEGIN").execute(&mut c).await.unwrap();
                sqlx::query("SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE")
                    .bind(dep)
                    .execute(&mut c)
                    .await
                    .unwrap();
                sqlx::query("COMMIT").execute(&mut c).await.unwrap();
            }
        }
    }
}

/// A Submit whose deadline passes while its insert waits answers an error and
/// stores nothing, even after the insert goes on.
async fn a_submit_past_its_deadline_stores_nothing(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let dep = submit_one(&mut c, spec("other")).await;
    let hold = Hold::take(&app.db.url, &dep).await;
    let mut late = spec("late");
    late.depends_on = vec![dep.clone()];
    let mut req = tonic::Request::new(pb::SubmitRequest {
        tasks: vec![late, spec("late")],
    });
    req.set_timeout(Duration::from_millis(300));
    let e = c.submit(req).await.unwrap_err();
    assert!(
        matches!(e.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{e:?}"
    );
    hold.release(&dep).await;
    // On SQLite the one writer runs this after the waiting insert.
    submit_one(&mut c, spec("after")).await;
    assert_eq!(
        count(&mut admin, "late").await,
        0,
        "a Submit that answered an error stored its tasks"
    );
}

all_backends!(
    limits_apply_after_expansion,
    the_largest_allowed_requests_are_accepted,
    repeated_dependencies_are_one_edge,
    a_submit_past_its_deadline_stores_nothing,
);
