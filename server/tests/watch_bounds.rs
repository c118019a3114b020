//! WatchTasks against hostile and careless callers: cursors beyond the log,
//! filters naming other producers' tasks, oversized filters. Each gets a clear
//! status (or a bounded answer), and no watcher disturbs what another receives.
//! On Postgres: transactions of other databases on the same server never hold
//! the watch back, and the watch lag is exported on /metrics.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use taskbroker_client::pb;
use taskbroker_server::api::auth::{Role, TokenEntry};
use tonic::Code;
use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

type Events = tonic::Streaming<pb::WatchTasksResponse>;
type Admin = pb::admin_service_client::AdminServiceClient<InterceptedService<Channel, Bearer>>;
type Producer = pb::broker_service_client::BrokerServiceClient<InterceptedService<Channel, Bearer>>;

#[derive(Clone)]
struct Bearer(MetadataValue<tonic::metadata::Ascii>);

impl Interceptor for Bearer {
    fn call(&mut self, mut r: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        r.metadata_mut().insert("authorization", self.0.clone());
        Ok(r)
    }
}

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789";
const OPS: &str = "ops-token-0123456789";

fn tokens() -> Vec<TokenEntry> {
    let tok = |role, token: &str, name: &str| TokenEntry {
        role,
        token: token.into(),
        name: Some(name.into()),
        workers: None,
        queues: None,
    };
    vec![
        tok(Role::Producer, ALICE, "alice"),
        tok(Role::Producer, BOB, "bob"),
        tok(Role::Admin, OPS, "ops"),
    ]
}

async fn as_(app: &TestApp, token: &str) -> (Producer, Admin) {
    let channel = Channel::from_shared(app.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let b = Bearer(format!("Bearer {token}").parse().unwrap());
    (
        pb::broker_service_client::BrokerServiceClient::with_interceptor(
            channel.clone(),
            b.clone(),
        ),
        pb::admin_service_client::AdminServiceClient::with_interceptor(channel, b),
    )
}

async fn submit_to(c: &mut Producer, queue: &str, n: usize) -> Vec<String> {
    c.submit(pb::SubmitRequest {
        tasks: (0..n).map(|_| spec(queue)).collect(),
    })
    .await
    .expect("submit")
    .into_inner()
    .results
    .into_iter()
    .map(|r| r.task_id)
    .collect()
}

fn queue_watch(queue: &str) -> pb::WatchTasksRequest {
    pb::WatchTasksRequest {
        queues: vec![queue.into()],
        ..Default::default()
    }
}

fn task_watch(ids: &[String], after: u64) -> pb::WatchTasksRequest {
    pb::WatchTasksRequest {
        task_ids: ids.to_vec(),
        after_event_id: after,
        ..Default::default()
    }
}

/// Reads until `n` events arrived; a stalled watch fails after 30 s.
async fn read_n(s: &mut Events, n: usize) -> Vec<pb::TaskEvent> {
    let mut got = Vec::new();
    let give_up = tokio::time::Instant::now() + Duration::from_secs(30);
    while got.len() < n {
        let m = tokio::time::timeout_at(give_up, s.message())
            .await
            .unwrap_or_else(|_| panic!("{n} events arrive (got {})", got.len()))
            .expect("stream ok")
            .expect("stream open");
        got.extend(m.events);
    }
    got
}

/// The kinds of `events`, per task, in order.
fn submitted_of(events: &[pb::TaskEvent], ids: &[String]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.kind == pb::TaskEventKind::Submitted as i32)
        .map(|e| e.task_id.clone())
        .filter(|id| ids.contains(id))
        .collect()
}

/// A producer that watches its own task from a cursor far beyond the log, before
/// anyone else watches, does not freeze the replica's other watches: the cursor
/// is refused, and an admin's queue watch opened after it sees every event.
async fn a_far_cursor_does_not_freeze_other_watchers(b: Backend) {
    let opts = Options {
        auth: tokens(),
        ..Options::default()
    };
    let Some(app) = spawn_app_with(b, opts).await else {
        return;
    };
    let (mut alice, mut alice_admin) = as_(&app, ALICE).await;
    let (_, mut ops) = as_(&app, OPS).await;
    let mine = submit_to(&mut alice, "mine", 1).await;
    // First watcher on the replica: a cursor of 2^62 (held open if accepted).
    let far = alice_admin.watch_tasks(task_watch(&mine, 1 << 62)).await;
    let mut watch = ops
        .watch_tasks(queue_watch("q"))
        .await
        .unwrap()
        .into_inner();
    let ids = submit_to(&mut alice, "q", 3).await;
    let got = read_n(&mut watch, 3).await;
    assert_eq!(submitted_of(&got, &ids), ids, "all three, in order");
    let e = far.expect_err("a cursor beyond the log is refused");
    assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
    assert_eq!(bad_field(&e).as_deref(), Some("after_event_id"));
    app.shutdown().await;
}

/// Hostile WatchTasks calls each get a clear status naming the field (or only
/// their own tasks' events), and the watches of others, one opened before and
/// one after, still see every event.
async fn hostile_watch_calls_are_refused_and_disturb_no_one(b: Backend) {
    let opts = Options {
        auth: tokens(),
        ..Options::default()
    };
    let Some(app) = spawn_app_with(b, opts).await else {
        return;
    };
    let (mut alice, mut alice_admin) = as_(&app, ALICE).await;
    let (mut bob, _) = as_(&app, BOB).await;
    let (_, mut ops) = as_(&app, OPS).await;
    let mut before = ops
        .watch_tasks(queue_watch("q"))
        .await
        .unwrap()
        .into_inner();
    // The log's first event is not hers (cursor 0 means the head, not the start).
    submit_to(&mut alice, "x", 1).await;
    let alices = submit_to(&mut alice, "q", 1).await;
    let bobs = submit_to(&mut bob, "q", 1).await;
    let seen = read_n(&mut before, 2).await;
    let last = seen.last().unwrap().event_id;

    let refused = |e: tonic::Status, code: Code, field: &str| {
        assert_eq!(e.code(), code, "{field}: {e:?}");
        assert_eq!(bad_field(&e).as_deref(), Some(field), "{e:?}");
    };
    // Cursors beyond the log: -1 as an int64 on the wire, i64::MAX, 2^62.
    for after in [u64::MAX, i64::MAX as u64, 1 << 62] {
        let e = ops
            .watch_tasks(pb::WatchTasksRequest {
                after_event_id: after,
                ..queue_watch("q")
            })
            .await
            .unwrap_err();
        refused(e, Code::OutOfRange, "after_event_id");
    }
    // A producer watches only tasks it submitted, named one by one: another
    // producer's task is not found (as if it did not exist), a filter without
    // task ids is refused, and so is one naming more than 1000.
    let e = alice_admin
        .watch_tasks(task_watch(&[alices[0].clone(), bobs[0].clone()], 0))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(!e.message().contains("bob"), "{e:?}");
    let e = alice_admin.watch_tasks(queue_watch("q")).await.unwrap_err();
    refused(e, Code::InvalidArgument, "task_ids");
    let many: Vec<String> = (0..1001).map(|i| format!("t{i}")).collect();
    let e = alice_admin
        .watch_tasks(task_watch(&many, 0))
        .await
        .unwrap_err();
    refused(e, Code::InvalidArgument, "task_ids");
    let e = ops.watch_tasks(task_watch(&many, 0)).await.unwrap_err();
    refused(e, Code::InvalidArgument, "task_ids");
    let queues: Vec<String> = (0..65).map(|i| format!("q{i}")).collect();
    let e = ops
        .watch_tasks(pb::WatchTasksRequest {
            queues,
            ..Default::default()
        })
        .await
        .unwrap_err();
    refused(e, Code::InvalidArgument, "queues");
    // 1000 names that match nothing: accepted, and only ever filters.
    let idle = ops.watch_tasks(task_watch(&many[..1000], 0)).await.unwrap();
    // Alice's own task from just before her submit: her events only, Bob's never.
    let hers = seen.iter().find(|e| e.task_id == alices[0]).unwrap();
    let mut own = alice_admin
        .watch_tasks(task_watch(&alices, hers.event_id as u64 - 1))
        .await
        .unwrap()
        .into_inner();

    let mut after = ops
        .watch_tasks(pb::WatchTasksRequest {
            after_event_id: last as u64,
            ..queue_watch("q")
        })
        .await
        .unwrap()
        .into_inner();
    let more = submit_to(&mut bob, "q", 3).await;
    assert_eq!(submitted_of(&read_n(&mut before, 3).await, &more), more);
    assert_eq!(submitted_of(&read_n(&mut after, 3).await, &more), more);
    // Alice's first event is her submit; what follows is hers too.
    let firsts = read_n(&mut own, 1).await;
    assert!(firsts.iter().all(|e| e.task_id == alices[0]), "{firsts:?}");
    assert_eq!(submitted_of(&firsts, &alices), alices);
    drop(idle);
    app.shutdown().await;
}

all_backends!(
    a_far_cursor_does_not_freeze_other_watchers,
    hostile_watch_calls_are_refused_and_disturb_no_one,
    watch_lag_is_exported
);

/// Postgres: a transaction that wrote in another database of the same server,
/// and stays open, does not hold back the events of this one (transaction ids
/// are server-wide; the horizon leaves other databases' transactions out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_databases_open_transaction_does_not_hold_the_watch() {
    let Some(app) = spawn_app(Backend::Postgres).await else {
        return;
    };
    let other = test_db(Backend::Postgres).await.unwrap();
    use sqlx::Connection;
    let mut elsewhere = sqlx::PgConnection::connect(&other.url).await.unwrap();
    sqlx::query("CREATE TABLE t (n int)")
        .execute(&mut elsewhere)
        .await
        .unwrap();
    sqlx::query("BEGIN").execute(&mut elsewhere).await.unwrap();
    sqlx::query("INSERT INTO t VALUES (1)")
        .execute(&mut elsewhere)
        .await
        .unwrap();
    let mut admin = app.admin().await;
    let mut watch = admin
        .watch_tasks(queue_watch("q"))
        .await
        .unwrap()
        .into_inner();
    let mut c = app.broker().await;
    let ids = submit(&mut c, vec![spec("q"), spec("q")]).await;
    let got = read_n(&mut watch, 2).await;
    assert_eq!(submitted_of(&got, &ids), ids);
    // Still open: the events arrived while it ran.
    sqlx::query("COMMIT").execute(&mut elsewhere).await.unwrap();
    app.shutdown().await;
}

async fn scrape(addr: SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out
}

fn watch_lag(text: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix("taskbroker_watch_lag_seconds "))
        .unwrap_or_else(|| panic!("watch lag exported: {text}"))
        .trim()
        .parse()
        .unwrap()
}

/// The watch lag on /metrics: how long the oldest committed event has waited
/// for an earlier writer of the same database. 0 when nothing waits (always on
/// SQLite and MySQL); on Postgres, an open writer holds a later event back, and the lag
/// grows with the clock until the writer ends.
async fn watch_lag_is_exported(b: Backend) {
    let opts = Options {
        metrics: true,
        ..Options::default()
    };
    let Some(app) = spawn_app_with(b, opts).await else {
        return;
    };
    let m = app.metrics_addr.unwrap();
    assert_eq!(watch_lag(&scrape(m).await), 0.0);
    let mut c = app.broker().await;
    // SQLite and MySQL commit events in id order: nothing is ever held back.
    if matches!(b, Backend::Sqlite | Backend::Mysql) {
        submit(&mut c, vec![spec("q")]).await;
        app.advance(Duration::from_secs(10));
        assert_eq!(watch_lag(&scrape(m).await), 0.0);
        return;
    }
    use sqlx::Connection;
    let mut early = sqlx::PgConnection::connect(&app.db.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut early).await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()")
        .execute(&mut early)
        .await
        .unwrap();
    submit(&mut c, vec![spec("q")]).await;
    app.advance(Duration::from_secs(10));
    let held = watch_lag(&scrape(m).await);
    assert!(held >= 10.0, "held for the 10 s the clock moved: {held}");
    sqlx::query("ROLLBACK").execute(&mut early).await.unwrap();
    assert_eq!(watch_lag(&scrape(m).await), 0.0);
    app.shutdown().await;
}
