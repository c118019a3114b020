//! Routing end to end over gRPC: labels on Lease, targets, sticky
//! retries and fan-out on Submit, prefer_same_worker on Fail, the per-worker
//! cap from the queue's settings, a long-poll woken for a targeted task, bad
//! input, and the worker registry shared by two replicas.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use taskbroker_client::pb;
use taskbroker_server::service::{QueueSettings, Settings};

fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn worker_req(queue: &str, id: &str, pairs: &[(&str, &str)], max: u32) -> pb::LeaseRequest {
    pb::LeaseRequest {
        worker_id: id.into(),
        labels: labels(pairs),
        ..lease_req(queue, max)
    }
}

fn targeted(queue: &str, pairs: &[(&str, &str)]) -> pb::TaskSpec {
    pb::TaskSpec {
        target: Some(pb::Target {
            worker_id: String::new(),
            labels: labels(pairs),
        }),
        ..spec(queue)
    }
}

async fn leased(
    c: &mut pb::broker_service_client::BrokerServiceClient<tonic::transport::Channel>,
    req: pb::LeaseRequest,
) -> Vec<pb::LeasedTask> {
    c.lease(req).await.expect("lease").into_inner().tasks
}

async fn labels_route_tasks_and_fanout_makes_copies(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    let mut admin = app.admin().await;
    let gpu = submit_one(&mut c, targeted("jobs", &[("gpu", "a100")])).await;
    let plain = submit_one(&mut c, spec("jobs")).await;
    let got = leased(&mut c, worker_req("jobs", "cpu", &[], 5)).await;
    assert_eq!(got.iter().map(|t| &t.task_id).collect::<Vec<_>>(), [&plain]);
    let got = leased(&mut c, worker_req("jobs", "g", &[("gpu", "a100")], 5)).await;
    assert_eq!(got.iter().map(|t| &t.task_id).collect::<Vec<_>>(), [&gpu]);
    let t = get(&mut admin, &gpu).await;
    assert_eq!(t.target.expect("target").labels, labels(&[("gpu", "a100")]));

    let r = c
        .submit(pb::SubmitRequest {
            tasks: vec![pb::TaskSpec {
                fanout: Some(pb::Fanout {
                    copies: 3,
                    distinct_workers: true,
                }),
                ..spec("fan")
            }],
        })
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].copy_task_ids.len(), 3);
    assert_eq!(r[0].copy_task_ids[0], r[0].task_id);
    let group = admin
        .list_tasks(pb::ListTasksRequest {
            fanout_group: r[0].task_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert_eq!(group.len(), 3);
    assert!(group.iter().all(|t| t.fanout_group == r[0].task_id));
    // One worker asking for ten gets one copy.
    let got = leased(&mut c, worker_req("fan", "a", &[], 10)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].fanout_group, r[0].task_id);
}

async fn prefer_same_worker_keeps_the_retry_for_the_worker(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    let mut admin = app.admin().await;
    let id = submit_one(
        &mut c,
        pb::TaskSpec {
            retry: retry_now(3),
            ..spec("q")
        },
    )
    .await;
    let t = leased(&mut c, worker_req("q", "w1", &[], 1))
        .await
        .remove(0);
    c.fail(pb::FailRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
        error_message: "local files are here".into(),
        prefer_same_worker: true,
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(get(&mut admin, &id).await.reserved_for, "w1");
    assert!(
        leased(&mut c, worker_req("q", "w2", &[], 1))
            .await
            .is_empty()
    );
    let back = leased(&mut c, worker_req("q", "w1", &[], 1)).await;
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].attempt, 2);
}

async fn a_queue_cap_limits_the_leases_of_each_worker(b: Backend) {
    let mut settings = Settings::default();
    settings.queues.insert(
        "capped".into(),
        QueueSettings {
            max_leases_per_worker: 2,
            retry: Default::default(),
            max_payload_bytes: 1 << 20,
            min_lease: Duration::from_secs(1),
            max_lease: Duration::from_secs(24 * 3600),
            retention: Duration::ZERO,
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
    let mut c = app.broker().await;
    submit(&mut c, (0..5).map(|_| spec("capped")).collect()).await;
    assert_eq!(
        leased(&mut c, worker_req("capped", "a", &[], 10))
            .await
            .len(),
        2
    );
    assert!(
        leased(&mut c, worker_req("capped", "a", &[], 10))
            .await
            .is_empty()
    );
    assert_eq!(
        leased(&mut c, worker_req("capped", "b", &[], 10))
            .await
            .len(),
        2
    );
}

async fn a_waiting_worker_with_the_labels_is_woken_for_a_targeted_task(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    let waiter = |id: &'static str, pairs: &'static [(&'static str, &'static str)]| {
        let mut c = c.clone();
        tokio::spawn(async move {
            leased(
                &mut c,
                pb::LeaseRequest {
                    wait: secs(20),
                    ..worker_req("w", id, pairs, 1)
                },
            )
            .await
        })
    };
    let cpu = waiter("cpu", &[]);
    let gpu = waiter("gpu", &[("gpu", "a100")]);
    app.until_waiting(2).await;
    let id = submit_one(&mut c, targeted("w", &[("gpu", "a100")])).await;
    let got = tokio::time::timeout(Duration::from_secs(10), gpu)
        .await
        .expect("the GPU worker was woken")
        .unwrap();
    assert_eq!(got[0].task_id, id);
    cpu.abort();
}

async fn bad_routing_input_names_the_field_and_changes_nothing(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    let mut admin = app.admin().await;
    let too_many: Vec<(String, String)> = (0..33).map(|i| (format!("k{i}"), "v".into())).collect();
    let cases: Vec<(pb::TaskSpec, &str)> = vec![
        (
            targeted("q", &[("gpu", "a 100")]),
            "tasks[1].target.labels.gpu",
        ),
        (targeted("q", &[("", "x")]), "tasks[1].target.labels"),
        (
            pb::TaskSpec {
                target: Some(pb::Target {
                    worker_id: String::new(),
                    labels: too_many.iter().cloned().collect(),
                }),
                ..spec("q")
            },
            "tasks[1].target.labels",
        ),
        (
            pb::TaskSpec {
                fanout: Some(pb::Fanout {
                    copies: 0,
                    distinct_workers: false,
                }),
                ..spec("q")
            },
            "tasks[1].fanout.copies",
        ),
        (
            pb::TaskSpec {
                fanout: Some(pb::Fanout {
                    copies: 1001,
                    distinct_workers: false,
                }),
                ..spec("q")
            },
            "tasks[1].fanout.copies",
        ),
        (
            pb::TaskSpec {
                key: "k".into(),
                fanout: Some(pb::Fanout {
                    copies: 2,
                    distinct_workers: false,
                }),
                ..spec("q")
            },
            "tasks[1].key",
        ),
        (
            pb::TaskSpec {
                sticky: Some(pb::StickyPolicy {
                    strategy: pb::StickyStrategy::Soft as i32,
                    timeout: secs(0),
                }),
                ..spec("q")
            },
            "tasks[1].sticky.timeout",
        ),
        (
            pb::TaskSpec {
                sticky: Some(pb::StickyPolicy {
                    strategy: 7,
                    timeout: None,
                }),
                ..spec("q")
            },
            "tasks[1].sticky.strategy",
        ),
    ];
    // The first task is fine: the whole call is refused all the same.
    for (task, field) in cases {
        let e = c
            .submit(pb::SubmitRequest {
                tasks: vec![spec("q"), task],
            })
            .await
            .expect_err(field);
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{field}: {e:?}");
        assert_eq!(bad_field(&e).as_deref(), Some(field), "{e:?}");
    }
    // Two specs of 600 copies: more than 1000 tasks in one call.
    let big = pb::TaskSpec {
        fanout: Some(pb::Fanout {
            copies: 600,
            distinct_workers: false,
        }),
        ..spec("q")
    };
    let e = c
        .submit(pb::SubmitRequest {
            tasks: vec![big.clone(), big],
        })
        .await
        .unwrap_err();
    assert_eq!(bad_field(&e).as_deref(), Some("tasks"));
    let e = c
        .lease(pb::LeaseRequest {
            labels: too_many.into_iter().collect(),
            ..lease_req("q", 1)
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(bad_field(&e).as_deref(), Some("labels"));
    let all = admin
        .list_tasks(pb::ListTasksRequest::default())
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert!(all.is_empty(), "{all:?}");
}

/// A queue with admission gates leases through its own statement: targets,
/// labels, distinct fan-out copies and the per-worker cap hold there too.
async fn routing_holds_in_a_queue_with_admission_gates(b: Backend) {
    let mut settings = Settings::default();
    settings.gates.insert(
        "gated".into(),
        taskbroker_server::domain::admission::QueueConfig {
            max_concurrent: 100,
            max_leases_per_worker: 3,
            ..Default::default()
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
    let mut c = app.broker().await;
    let for_b = submit_one(
        &mut c,
        pb::TaskSpec {
            target: Some(pb::Target {
                worker_id: "b".into(),
                labels: HashMap::new(),
            }),
            ..spec("gated")
        },
    )
    .await;
    let gpu = submit_one(&mut c, targeted("gated", &[("gpu", "a100")])).await;
    let copies = c
        .submit(pb::SubmitRequest {
            tasks: vec![pb::TaskSpec {
                fanout: Some(pb::Fanout {
                    copies: 3,
                    distinct_workers: true,
                }),
                ..spec("gated")
            }],
        })
        .await
        .expect("submit")
        .into_inner()
        .results[0]
        .copy_task_ids
        .clone();
    assert_eq!(copies.len(), 3);
    let plain = submit_one(&mut c, spec("gated")).await;
    // Worker a (no labels) may take one copy and the plain task, nothing else.
    let got: Vec<String> = leased(&mut c, worker_req("gated", "a", &[], 10))
        .await
        .into_iter()
        .map(|t| t.task_id)
        .collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.contains(&plain), "{got:?}");
    assert_eq!(got.iter().filter(|id| copies.contains(id)).count(), 1);
    assert!(!got.contains(&for_b) && !got.contains(&gpu));
    assert!(
        leased(&mut c, worker_req("gated", "a", &[], 10))
            .await
            .is_empty()
    );
    // Worker b with the label: its own task, the GPU task and one copy, but its
    // cap is 3.
    let got: Vec<String> = leased(&mut c, worker_req("gated", "b", &[("gpu", "a100")], 10))
        .await
        .into_iter()
        .map(|t| t.task_id)
        .collect();
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got.contains(&for_b) && got.contains(&gpu), "{got:?}");
    assert_eq!(got.iter().filter(|id| copies.contains(id)).count(), 1);
    assert!(
        leased(&mut c, worker_req("gated", "b", &[], 10))
            .await
            .is_empty()
    );
    // The last copy goes to a third worker.
    assert_eq!(
        leased(&mut c, worker_req("gated", "c", &[], 10))
            .await
            .len(),
        1
    );
}

all_backends!(
    labels_route_tasks_and_fanout_makes_copies,
    routing_holds_in_a_queue_with_admission_gates,
    prefer_same_worker_keeps_the_retry_for_the_worker,
    a_queue_cap_limits_the_leases_of_each_worker,
    a_waiting_worker_with_the_labels_is_woken_for_a_targeted_task,
    bad_routing_input_names_the_field_and_changes_nothing,
    workers_are_listed_with_their_leases,
);

async fn workers_are_listed_with_their_leases(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    let mut admin = app.admin().await;
    let id = submit_one(&mut c, spec("jobs")).await;
    leased(&mut c, worker_req("jobs", "alpha", &[("zone", "a")], 1)).await;
    leased(&mut c, worker_req("other", "beta", &[], 1)).await;
    let all = admin
        .list_workers(pb::ListWorkersRequest::default())
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = all.workers.iter().map(|w| w.worker_id.as_str()).collect();
    assert_eq!(names, ["alpha", "beta"]);
    assert_eq!(all.workers[0].leases_held, 1);
    assert_eq!(all.workers[0].labels, labels(&[("zone", "a")]));
    assert_eq!(all.workers[0].queues, ["jobs"]);
    let page = admin
        .list_workers(pb::ListWorkersRequest {
            page_size: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.workers.len(), 1);
    assert_eq!(page.next_page_token, "alpha");
    let by_label = admin
        .list_workers(pb::ListWorkersRequest {
            labels: labels(&[("zone", "a")]),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(by_label.workers.len(), 1);
    let one = admin
        .get_worker(pb::GetWorkerRequest {
            worker_id: "alpha".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(one.leases.len(), 1);
    assert_eq!(one.leases[0].task_id, id);
    let e = admin
        .get_worker(pb::GetWorkerRequest {
            worker_id: "nobody".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    // Past worker_ttl (5 min by default), a worker is no longer listed.
    app.advance(Duration::from_secs(301));
    let later = admin
        .list_workers(pb::ListWorkersRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(later.workers.is_empty(), "{later:?}");
}

/// Two replicas on one Postgres: each lists the workers the other saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_see_each_others_workers() {
    let Some(db) = test_db(Backend::Postgres).await else {
        return;
    };
    let db = std::sync::Arc::new(db);
    let one = spawn_on(db.clone(), Options::default()).await;
    let two = spawn_on(db.clone(), Options::default()).await;
    let mut c1 = one.broker().await;
    let mut c2 = two.broker().await;
    leased(&mut c1, worker_req("q", "on-one", &[("replica", "1")], 1)).await;
    leased(&mut c2, worker_req("q", "on-two", &[("replica", "2")], 1)).await;
    for app in [&one, &two] {
        let listed = app
            .admin()
            .await
            .list_workers(pb::ListWorkersRequest {
                queue: "q".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let names: Vec<&str> = listed
            .workers
            .iter()
            .map(|w| w.worker_id.as_str())
            .collect();
        assert_eq!(names, ["on-one", "on-two"]);
    }
}
