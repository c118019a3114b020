//! A database outage: calls answer UNAVAILABLE (never a panic, never a hang), the
//! broker keeps running, and it recovers by itself when the database returns.
//! The outage is real: Postgres is reached through a TCP relay that this test
//! cuts and restores.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::*;
use taskbroker_client::pb;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tonic::Code;

/// Relays 127.0.0.1:<port> to the Postgres cluster; `cut` drops every relayed
/// connection and refuses new ones until `restore`.
struct Relay {
    port: u16,
    down: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Relay {
    async fn start(upstream: String) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let down = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (d, c) = (down.clone(), conns.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if d.load(Ordering::SeqCst) {
                    continue; // dropped: connection refused in effect
                }
                let upstream = upstream.clone();
                c.lock().await.push(tokio::spawn(async move {
                    if let Ok(mut out) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                }));
            }
        });
        Relay { port, down, conns }
    }

    async fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
        for h in self.conns.lock().await.drain(..) {
            h.abort();
        }
    }

    fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_outage_answers_unavailable_and_the_broker_recovers() {
    let Some(db) = test_db(Backend::Postgres).await else {
        return;
    };
    // postgres://user@host:port/db -> relay in front of host:port.
    let (scheme_user, rest) = db.url.split_once('@').unwrap();
    let (hostport, dbname) = rest.split_once('/').unwrap();
    let relay = Relay::start(hostport.to_string()).await;
    let relayed = Arc::new(TestDbUrl(format!(
        "{scheme_user}@127.0.0.1:{}/{dbname}",
        relay.port
    )));
    let app = spawn_on(relayed.as_test_db(), Options::default()).await;
    let mut c = app.broker().await;
    let before = submit_one(&mut c, spec("outage")).await;

    relay.cut().await;
    let err = c
        .submit(pb::SubmitRequest {
            tasks: vec![spec("outage")],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{}", err.message());
    assert!(
        !err.message().contains("sqlx"),
        "no database text: {}",
        err.message()
    );
    let err = c.lease(lease_req("outage", 1)).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);

    relay.restore();
    // The pool reconnects on its own; the first calls after the restore may still
    // meet a dead pooled connection, so allow a few tries.
    let mut leased = None;
    for _ in 0..20 {
        match c.lease(lease_req("outage", 1)).await {
            Ok(r) => {
                leased = Some(r.into_inner().tasks);
                break;
            }
            Err(e) => assert_eq!(e.code(), Code::Unavailable, "{}", e.message()),
        }
    }
    let leased = leased.expect("the broker recovered");
    assert_eq!(leased[0].task_id, before, "the acknowledged task survived");
    app.shutdown().await;
}

/// A database URL wrapped as a TestDb (no cleanup needed: the database belongs to
/// the test cluster).
struct TestDbUrl(String);

impl TestDbUrl {
    fn as_test_db(&self) -> Arc<TestDb> {
        Arc::new(TestDb::from_url(self.0.clone()))
    }
}
