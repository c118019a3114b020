//! Flow over gRPC: WatchTasks resumes after a dropped connection with no
//! gap and no repeat, across two replicas; dependencies and events end to end;
//! bad input names its field.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use taskbroker_client::pb;
use tonic::Code;

type Admin = pb::admin_service_client::AdminServiceClient<tonic::transport::Channel>;
type Events = tonic::Streaming<pb::WatchTasksResponse>;

async fn watch(admin: &mut Admin, queue: &str, after: u64) -> Events {
    admin
        .watch_tasks(pb::WatchTasksRequest {
            queues: vec![queue.into()],
            after_event_id: after,
            ..Default::default()
        })
        .await
        .expect("watch")
        .into_inner()
}

/// Reads events until `pred` holds for what was read (bounded: 60 s).
async fn read_until(
    s: &mut Events,
    got: &mut Vec<pb::TaskEvent>,
    pred: impl Fn(&[pb::TaskEvent]) -> bool,
) {
    let give_up = tokio::time::Instant::now() + Duration::from_secs(60);
    while !pred(got) {
        let m = tokio::time::timeout_at(give_up, s.message())
            .await
            .expect("events arrive in time")
            .expect("stream ok")
            .expect("stream open");
        got.extend(m.events);
    }
}

/// Producers and workers on both replicas make events concurrently; a watcher
/// reads part of them from replica A, drops the connection, and resumes on
/// replica B from its last event_id. It sees every event once, in id order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_resumes_across_replicas_without_gap_or_repeat() {
    let Some(db) = test_db(Backend::Postgres).await else {
        return;
    };
    let db = Arc::new(db);
    let opts = || Options {
        manual_clock: false,
        ..Options::default()
    };
    let a = spawn_on(db.clone(), opts()).await;
    let b = spawn_on(db.clone(), opts()).await;
    let mut first = watch(&mut a.admin().await, "w", 0).await;
    const TASKS: usize = 400;
    // Eight producers (four per replica) submit in small batches at once, so
    // transactions commit out of the order of their event ids.
    let mut producers = Vec::new();
    for p in 0..8 {
        let mut c = if p % 2 == 0 {
            a.broker().await
        } else {
            b.broker().await
        };
        producers.push(tokio::spawn(async move {
            for k in 0..(TASKS / 8 / 5) {
                let specs = (0..5)
                    .map(|i| pb::TaskSpec {
                        key: format!("p{p}-{k}-{i}"),
                        ..spec("w")
                    })
                    .collect();
                submit(&mut c, specs).await;
            }
        }));
    }
    // Workers on both replicas lease and complete everything.
    let completed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..4 {
        let mut c = if w % 2 == 0 {
            a.broker().await
        } else {
            b.broker().await
        };
        let completed = completed.clone();
        workers.push(tokio::spawn(async move {
            use std::sync::atomic::Ordering::SeqCst;
            while completed.load(SeqCst) < TASKS {
                let leased = c
                    .lease(pb::LeaseRequest {
                        wait: secs(1),
                        ..lease_req("w", 7)
                    })
                    .await
                    .expect("lease")
                    .into_inner()
                    .tasks;
                for t in leased {
                    c.complete(pb::CompleteRequest {
                        task_id: t.task_id,
                        lease_token: t.lease_token,
                        result: Vec::new(),
                        lease_next: None,
                    })
                    .await
                    .unwrap();
                    completed.fetch_add(1, SeqCst);
                }
            }
        }));
    }
    let mut got = Vec::new();
    read_until(&mut first, &mut got, |g| g.len() >= 300).await;
    drop(first);
    let last = got.last().unwrap().event_id;
    for p in producers {
        p.await.unwrap();
    }
    for w in workers {
        w.await.unwrap();
    }
    let mut second = watch(&mut b.admin().await, "w", last).await;
    read_until(&mut second, &mut got, |g| g.len() >= TASKS * 3).await;
    // Nothing more than the three events of each task arrives.
    let extra = tokio::time::timeout(Duration::from_millis(500), second.message()).await;
    assert!(
        extra.is_err(),
        "no event beyond the expected ones: {extra:?}"
    );
    assert_eq!(got.len(), TASKS * 3);
    assert!(
        got.windows(2).all(|w| w[0].event_id < w[1].event_id),
        "in id order, no repeat"
    );
    let mut per_task: HashMap<&str, Vec<i32>> = HashMap::new();
    for e in &got {
        per_task.entry(&e.task_id).or_default().push(e.kind);
    }
    assert_eq!(per_task.len(), TASKS);
    let lifecycle = [
        pb::TaskEventKind::Submitted as i32,
        pb::TaskEventKind::Leased as i32,
        pb::TaskEventKind::Succeeded as i32,
    ];
    assert!(per_task.values().all(|k| k == &lifecycle));
}

/// A report waits for its three extracts; the watch shows it unblock and run.
async fn dependencies_end_to_end(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let ids = submit(
        &mut c,
        vec![
            spec("extract"),
            spec("extract"),
            spec("extract"),
            pb::TaskSpec {
                depends_on_index: vec![0, 1, 2],
                ..spec("report")
            },
        ],
    )
    .await;
    let report = get(&mut admin, &ids[3]).await;
    assert_eq!(state(&report), pb::TaskState::Blocked);
    assert_eq!(report.dependencies_remaining, 3);
    let mut deps = report.depends_on.clone();
    deps.sort();
    let mut want = ids[..3].to_vec();
    want.sort();
    assert_eq!(deps, want);
    let mut events = admin
        .watch_tasks(pb::WatchTasksRequest {
            task_ids: vec![ids[3].clone()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    for _ in 0..3 {
        let t = lease_one(&mut c, "extract").await;
        c.complete(pb::CompleteRequest {
            task_id: t.task_id,
            lease_token: t.lease_token,
            result: Vec::new(),
            lease_next: None,
        })
        .await
        .unwrap();
    }
    // A watch from "now" may start a little before the call (never after it): the
    // report's SUBMITTED event can come first.
    let mut got = Vec::new();
    let unblocked = pb::TaskEventKind::Unblocked as i32;
    read_until(&mut events, &mut got, |g| {
        g.iter().any(|e| e.kind == unblocked)
    })
    .await;
    let first = got
        .iter()
        .find(|e| e.kind != pb::TaskEventKind::Submitted as i32)
        .unwrap();
    assert_eq!(first.kind, unblocked);
    assert_eq!(first.state, pb::TaskState::Ready as i32);
    assert_eq!(lease_one(&mut c, "report").await.task_id, ids[3]);
    // The history, paged.
    let page = admin
        .list_task_events(pb::ListTaskEventsRequest {
            task_id: ids[3].clone(),
            page_size: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let kinds: Vec<i32> = page.events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            pb::TaskEventKind::Submitted as i32,
            pb::TaskEventKind::Unblocked as i32
        ]
    );
    assert_eq!(page.events[0].state, pb::TaskState::Blocked as i32);
    let rest = admin
        .list_task_events(pb::ListTaskEventsRequest {
            task_id: ids[3].clone(),
            page_size: 2,
            page_token: page.next_page_token,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(rest.events[0].kind, pb::TaskEventKind::Leased as i32);
    // A failed extract cancels its dependents with the reason.
    let ids = submit(
        &mut c,
        vec![
            spec("extract2"),
            pb::TaskSpec {
                depends_on_index: vec![0],
                ..spec("report2")
            },
        ],
    )
    .await;
    let t = lease_one(&mut c, "extract2").await;
    c.fail(pb::FailRequest {
        task_id: t.task_id,
        lease_token: t.lease_token,
        error_message: "broken".into(),
        non_retryable: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let r = get(&mut admin, &ids[1]).await;
    assert_eq!(state(&r), pb::TaskState::Cancelled);
    assert_eq!(r.cancel_reason, pb::CancelReason::DependencyFailed as i32);
}

/// Unknown ids, later indexes and bad watch filters answer INVALID_ARGUMENT
/// naming the field, and create nothing.
async fn bad_flow_input_names_the_field(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let cases: Vec<(pb::TaskSpec, &str)> = vec![
        (
            pb::TaskSpec {
                depends_on: vec!["no-such-task".into()],
                ..spec("x")
            },
            "tasks[1].depends_on[0]",
        ),
        (
            pb::TaskSpec {
                depends_on_index: vec![1],
                ..spec("x")
            },
            "tasks[1].depends_on_index[0]",
        ),
        (
            pb::TaskSpec {
                retry: Some(pb::RetryPolicy {
                    schedule: vec![prost_types::Duration {
                        seconds: -1,
                        nanos: 0,
                    }],
                    ..Default::default()
                }),
                ..spec("x")
            },
            "tasks[1].retry.schedule[0]",
        ),
    ];
    for (bad, field) in cases {
        let e = c
            .submit(pb::SubmitRequest {
                tasks: vec![spec("x"), bad],
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{field}: {e:?}");
        assert_eq!(bad_field(&e).as_deref(), Some(field));
    }
    let none = admin
        .list_tasks(pb::ListTasksRequest {
            queue: "x".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(none.tasks.is_empty(), "nothing was created");
    let e = admin
        .watch_tasks(pb::WatchTasksRequest {
            kinds: vec![99],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad_field(&e).as_deref(), Some("kinds[0]"));
    let e = admin
        .requeue_tasks(pb::RequeueTasksRequest {
            filter: Some(pb::TaskSelector {
                queue: "x".into(),
                states: vec![pb::TaskState::Ready as i32],
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad_field(&e).as_deref(), Some("filter.states[0]"));
}

all_backends!(
    dependencies_end_to_end,
    bad_flow_input_names_the_field,
    wait_follows_the_stream,
    submit_and_wait_follows_the_stream_not_polling,
    explain_names_the_unfinished_dependencies
);

/// client-rs `wait` follows the task on WatchTasks to its outcome.
async fn wait_follows_the_stream(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let client = taskbroker_client::Client::connect(app.url()).await.unwrap();
    let mut c = app.broker().await;
    let id = submit_one(&mut c, spec("wq")).await;
    let waiter = {
        let client = client.clone();
        let id = id.clone();
        tokio::spawn(async move { client.wait(&id, Duration::from_secs(30)).await })
    };
    let t = lease_one(&mut c, "wq").await;
    // Cancel while leased, then the worker reports: the task ends CANCELLED.
    app.admin()
        .await
        .cancel_task(pb::CancelTaskRequest {
            task_id: id.clone(),
        })
        .await
        .unwrap();
    c.fail(pb::FailRequest {
        task_id: t.task_id,
        lease_token: t.lease_token,
        error_message: "stopped".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    match waiter.await.unwrap() {
        Err(taskbroker_client::Error::TaskFailed { state, .. }) => {
            assert_eq!(state, pb::TaskState::Cancelled)
        }
        other => panic!("expected CANCELLED, got {other:?}"),
    }
}

/// The broker's count of `method` calls answered OK (its Prometheus metrics).
async fn calls(addr: std::net::SocketAddr, method: &str) -> u64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let prefix = format!(
        "taskbroker_rpc_duration_seconds_count{{method=\"/taskbroker.v1.{method}\",code=\"OK\"}} "
    );
    out.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// client-rs `submit_and_wait` follows the task on WatchTasks, not by polling:
/// the broker sees the stream opened while the task is still READY, and the
/// waiter reads the task at most twice (once when the stream opened, once on
/// the outcome's event).
async fn submit_and_wait_follows_the_stream_not_polling(b: Backend) {
    let opts = Options {
        metrics: true,
        ..Options::default()
    };
    let Some(app) = spawn_app_with(b, opts).await else {
        return;
    };
    let http = app.metrics_addr.expect("metrics port");
    let client = taskbroker_client::Client::connect(app.url()).await.unwrap();
    let waiter = tokio::spawn(async move {
        let spec = taskbroker_client::TaskSpec::new("sw", "in");
        client.submit_and_wait(spec, Duration::from_secs(60)).await
    });
    // The task stays READY until the broker has answered the waiter's stream.
    let give_up = tokio::time::Instant::now() + Duration::from_secs(60);
    while calls(http, "AdminService/WatchTasks").await == 0 {
        assert!(tokio::time::Instant::now() < give_up, "no WatchTasks call");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut c = app.broker().await;
    let t = lease_one(&mut c, "sw").await;
    c.complete(pb::CompleteRequest {
        task_id: t.task_id,
        lease_token: t.lease_token,
        result: b"out".to_vec(),
        lease_next: None,
    })
    .await
    .unwrap();
    assert_eq!(waiter.await.unwrap().unwrap(), b"out");
    let reads = calls(http, "AdminService/GetTask").await;
    assert!(reads <= 2, "{reads} GetTask calls: the waiter polled");
    assert_eq!(calls(http, "AdminService/WatchTasks").await, 1);
}

/// ExplainTask on a BLOCKED task names the dependencies that have not finished
/// (BLOCKED_BY_DEPENDENCY, ids in holder_task_ids); a finished one drops out.
async fn explain_names_the_unfinished_dependencies(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let ids = submit(
        &mut c,
        vec![
            spec("ex"),
            spec("ex"),
            pb::TaskSpec {
                depends_on_index: vec![0, 1],
                ..spec("exr")
            },
        ],
    )
    .await;
    let explain = |admin: &mut Admin, id: String| {
        let mut admin = admin.clone();
        async move {
            admin
                .explain_task(pb::ExplainTaskRequest { task_id: id })
                .await
                .unwrap()
                .into_inner()
        }
    };
    let e = explain(&mut admin, ids[2].clone()).await;
    assert_eq!(e.state(), pb::TaskState::Blocked);
    assert_eq!(e.gates[0].kind(), pb::GateKind::BlockedByDependency);
    let mut want = ids[..2].to_vec();
    want.sort();
    assert_eq!(e.gates[0].holder_task_ids, want);
    assert!(
        e.gates[0].detail.contains(&want[0]),
        "{}",
        e.gates[0].detail
    );
    assert!(
        e.gates
            .iter()
            .all(|g| g.kind() != pb::GateKind::None && g.kind() != pb::GateKind::WaitingBehind)
    );
    // One dependency succeeds: only the other is named.
    let t = lease_one(&mut c, "ex").await;
    c.complete(pb::CompleteRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token,
        result: Vec::new(),
        lease_next: None,
    })
    .await
    .unwrap();
    let rest: Vec<String> = ids[..2]
        .iter()
        .filter(|i| **i != t.task_id)
        .cloned()
        .collect();
    let e = explain(&mut admin, ids[2].clone()).await;
    assert_eq!(e.gates[0].kind(), pb::GateKind::BlockedByDependency);
    assert_eq!(e.gates[0].holder_task_ids, rest);
    // The other too: the task is READY and nothing names a dependency.
    let t = lease_one(&mut c, "ex").await;
    c.complete(pb::CompleteRequest {
        task_id: t.task_id,
        lease_token: t.lease_token,
        result: Vec::new(),
        lease_next: None,
    })
    .await
    .unwrap();
    let e = explain(&mut admin, ids[2].clone()).await;
    assert_eq!(e.state(), pb::TaskState::Ready);
    assert!(
        e.gates
            .iter()
            .all(|g| g.kind() != pb::GateKind::BlockedByDependency)
    );
}
