//! Fault tests of load shapes: a retry storm (every task fails three times with a
//! tiny backoff), 1,000 idle long-polls while Submits and Leases still answer, and
//! 10,000 leases expiring at once. Real broker processes; see `fault_harness`.

mod common;
mod fault_harness;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use fault_harness::*;
use taskbroker_client::pb;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use tokio_util::sync::CancellationToken;
use tonic::Code;

fn pb_dur(d: Duration) -> Option<prost_types::Duration> {
    Some(prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    })
}

/// One number from the database.
async fn count(database_url: &str, sql: &str) -> i64 {
    if database_url.starts_with("mysql") {
        let mut c = <sqlx::MySqlConnection as sqlx::Connection>::connect(database_url)
            .await
            .unwrap();
        sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_one(&mut c)
            .await
            .unwrap()
    } else if database_url.starts_with("postgres") {
        let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(database_url)
            .await
            .unwrap();
        sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_one(&mut c)
            .await
            .unwrap()
    } else {
        sqlite(database_url)
            .query_row(sql, [], |r| r.get(0))
            .unwrap()
    }
}

/// Every task fails three times (retry after 1 ms), then succeeds on its fourth
/// attempt: the storm of retries settles with exactly four attempts per task.
async fn a_retry_storm_settles_every_task_after_exactly_four_attempts(b: Backend) {
    let Some(db) = test_db(b).await else { return };
    let logs = tempfile::tempdir().unwrap();
    let broker = Broker::start("broker", logs.path(), &db.url, &[]).await;
    let urls = vec![broker.url()];
    let ledger = Arc::new(Ledger::default());
    let stop = CancellationToken::new();
    let plan = WorkerPlan {
        fail_first: 3,
        // Long enough that no lease expires: the attempts counted are the planned ones.
        lease: Duration::from_secs(60),
        max_tasks: 32,
        complete_many: false,
    };
    let workers = spawn_workers(4, &urls, "storm", plan, &ledger, &stop);
    const TASKS: usize = 400;
    produce(
        urls.clone(),
        "storm".into(),
        TASKS,
        100,
        ledger.clone(),
        Instant::now() + Duration::from_secs(60),
        Some(pb::RetryPolicy {
            max_attempts: 4,
            initial_backoff: pb_dur(Duration::from_millis(1)),
            jitter: Some(0.0),
            ..Default::default()
        }),
    )
    .await;
    settle_and_check(
        &broker.url(),
        &db.url,
        "storm",
        &ledger,
        Duration::from_secs(120),
    )
    .await;
    stop_workers(stop, workers).await;
    assert_eq!(*ledger.failed.lock().unwrap(), 3 * TASKS as u64);
    let q = "FROM tasks WHERE queue = 'storm'";
    assert_eq!(
        count(&db.url, &format!("SELECT count(*) {q}")).await,
        TASKS as i64
    );
    assert_eq!(
        count(&db.url, &format!("SELECT count(*) {q} AND attempt <> 4")).await,
        0,
        "every task ran exactly four times"
    );
    let attempts = |outcome: &str| {
        format!("SELECT count(*) FROM task_attempts_all WHERE outcome = '{outcome}'")
    };
    assert_eq!(count(&db.url, &attempts("failed")).await, 3 * TASKS as i64);
    assert_eq!(count(&db.url, &attempts("succeeded")).await, TASKS as i64);
}

/// 1,000 long-polls wait on an empty queue while Submits and Leases on another
/// queue keep answering; then 1,000 tasks wake every one of them.
///
/// The one timing bound in the fault tests, from the issue's spec ("answer within
/// a second"), kept generous for a loaded 2-core CI box and a debug build: the
/// median of 10 Submit + Lease round trips is under 1 s and none takes 5 s. A
/// broker that tied a database connection or a thread to each waiting poll would
/// answer in tens of seconds (when the polls time out), not in milliseconds.
async fn a_thousand_idle_long_polls_leave_submit_and_lease_answering(b: Backend) {
    let Some(db) = test_db(b).await else { return };
    let logs = tempfile::tempdir().unwrap();
    let broker = Broker::start("broker", logs.path(), &db.url, &["--max-wait", "60s"]).await;
    // 100 streams per connection (HTTP/2 servers limit concurrent streams).
    let channels: Vec<_> = (0..10).map(|_| channel(&broker.url())).collect();
    let mut polls = Vec::new();
    for i in 0..1000 {
        let mut c = BrokerServiceClient::new(channels[i % 10].clone());
        polls.push(tokio::spawn(async move {
            c.lease(pb::LeaseRequest {
                labels: Default::default(),
                worker_id: format!("idle-{i}"),
                queues: vec!["idle".into()],
                max_tasks: 1,
                lease_duration: pb_dur(Duration::from_secs(60)),
                wait: pb_dur(Duration::from_secs(55)),
            })
            .await
        }));
    }
    wait_until(
        "1,000 long-polls waiting",
        Duration::from_secs(60),
        || async {
            broker
                .metrics()
                .await
                .contains("taskbroker_lease_waiters 1000")
        },
    )
    .await;

    let mut c = BrokerServiceClient::new(channel(&broker.url()));
    let mut rounds = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        submit_one(&mut c, spec("busy")).await;
        let leased = lease(&mut c, "busy", 1).await;
        assert_eq!(leased.len(), 1, "the busy queue's task is leased");
        rounds.push(started.elapsed());
    }
    rounds.sort();
    assert!(
        rounds[rounds.len() / 2] < Duration::from_secs(1) && rounds[9] < Duration::from_secs(5),
        "Submit + Lease round trips with 1,000 idle long-polls: {rounds:?}"
    );

    // Every waiting poll is woken and served, each with a task of its own.
    let tasks: Vec<_> = (0..1000).map(|_| spec("idle")).collect();
    submit(&mut c, tasks).await;
    let mut got = HashSet::new();
    for p in polls {
        let r = tokio::time::timeout(Duration::from_secs(60), p)
            .await
            .expect("the long-poll answers")
            .unwrap()
            .expect("the long-poll answers OK");
        let tasks = r.into_inner().tasks;
        assert_eq!(tasks.len(), 1, "each waiting poll gets one task");
        assert!(got.insert(tasks[0].task_id.clone()), "a task leased twice");
    }
    assert_eq!(got.len(), 1000);
}

/// 10,000 leases expire within moments of each other (all leased, then all
/// extended to the same short expiry): the reaper reclaims every one, workers run
/// them all again, the first holders' tokens are fenced off, nothing runs twice.
async fn ten_thousand_leases_expiring_at_once_are_reclaimed_and_run_again(b: Backend) {
    let Some(db) = test_db(b).await else { return };
    let logs = tempfile::tempdir().unwrap();
    let broker = Broker::start("broker", logs.path(), &db.url, &[]).await;
    let urls = vec![broker.url()];
    let ledger = Arc::new(Ledger::default());
    const TASKS: usize = 10_000;
    produce(
        urls.clone(),
        "expiry".into(),
        TASKS,
        1000,
        ledger.clone(),
        Instant::now() + Duration::from_secs(120),
        None,
    )
    .await;
    let mut c = BrokerServiceClient::new(channel(&broker.url()));
    let mut first = Vec::new();
    while first.len() < TASKS {
        let r = c
            .lease(pb::LeaseRequest {
                labels: Default::default(),
                worker_id: "doomed".into(),
                queues: vec!["expiry".into()],
                max_tasks: 256,
                lease_duration: pb_dur(Duration::from_secs(120)),
                wait: None,
            })
            .await
            .expect("lease")
            .into_inner();
        assert!(!r.tasks.is_empty(), "ran out after {} leases", first.len());
        first.extend(r.tasks);
    }
    // All expire together: one short extension for every lease, back to back.
    for chunk in first.chunks(1000) {
        let r = c
            .heartbeat(pb::HeartbeatRequest {
                worker_id: "doomed".into(),
                leases: chunk
                    .iter()
                    .map(|t| pb::LeaseRef {
                        task_id: t.task_id.clone(),
                        lease_token: t.lease_token.clone(),
                    })
                    .collect(),
                extend_by: pb_dur(Duration::from_millis(500)),
            })
            .await
            .expect("heartbeat")
            .into_inner();
        assert!(r.leases.iter().all(|l| !l.lost), "every lease was live");
    }
    let stop = CancellationToken::new();
    let plan = WorkerPlan {
        max_tasks: 256,
        lease: Duration::from_secs(60),
        complete_many: true,
        ..WorkerPlan::default()
    };
    let workers = spawn_workers(4, &urls, "expiry", plan, &ledger, &stop);
    settle_and_check(
        &broker.url(),
        &db.url,
        "expiry",
        &ledger,
        Duration::from_secs(180),
    )
    .await;
    stop_workers(stop, workers).await;
    assert_eq!(
        count(
            &db.url,
            "SELECT count(*) FROM tasks WHERE queue = 'expiry' AND attempt <> 2"
        )
        .await,
        0,
        "every task was reclaimed once and run once more"
    );
    assert_eq!(
        count(
            &db.url,
            "SELECT count(*) FROM task_attempts_all WHERE outcome = 'lease_expired'"
        )
        .await,
        TASKS as i64
    );
    // The first holders come back late: fenced off, every one.
    for t in first.iter().step_by(100) {
        let err = c
            .complete(pb::CompleteRequest {
                task_id: t.task_id.clone(),
                lease_token: t.lease_token.clone(),
                result: vec![],
                lease_next: None,
            })
            .await
            .expect_err("a reclaimed lease cannot complete");
        assert_eq!(err.code(), Code::Aborted);
        assert_eq!(error_reason(&err).as_deref(), Some("LEASE_LOST"));
    }
}

all_backends!(
    a_retry_storm_settles_every_task_after_exactly_four_attempts,
    a_thousand_idle_long_polls_leave_submit_and_lease_answering,
    ten_thousand_leases_expiring_at_once_are_reclaimed_and_run_again,
);
