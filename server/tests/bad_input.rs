//! Bad input gets a clear status naming the field, and changes nothing.

mod common;

use common::*;
use taskbroker_client::pb;
use tonic::Code;

fn check(r: Result<impl std::fmt::Debug, tonic::Status>, code: Code, field: &str) {
    let s = r.expect_err("must be rejected");
    assert_eq!(s.code(), code, "{field}: {}", s.message());
    assert!(
        s.message().contains(field),
        "message {:?} names {field}",
        s.message()
    );
    if matches!(code, Code::InvalidArgument | Code::ResourceExhausted) {
        assert_eq!(bad_field(&s).as_deref(), Some(field));
    }
}

async fn submits_with_bad_fields_are_rejected_and_store_nothing(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let neg = Some(prost_types::Duration {
        seconds: -1,
        nanos: 0,
    });
    let now = chrono::Utc::now();
    let cases: Vec<(Vec<pb::TaskSpec>, Code, &str)> = vec![
        (vec![], Code::InvalidArgument, "tasks"),
        (vec![spec("q"); 1001], Code::InvalidArgument, "tasks"),
        (vec![spec("")], Code::InvalidArgument, "tasks[0].queue"),
        (
            vec![spec("ok"), spec("has space")],
            Code::InvalidArgument,
            "tasks[1].queue",
        ),
        (
            vec![spec(&"a".repeat(129))],
            Code::InvalidArgument,
            "tasks[0].queue",
        ),
        (
            vec![pb::TaskSpec {
                payload: vec![0; (1 << 20) + 1],
                ..spec("q")
            }],
            Code::ResourceExhausted,
            "tasks[0].payload",
        ),
        (
            vec![pb::TaskSpec {
                retry: Some(pb::RetryPolicy {
                    initial_backoff: neg,
                    ..Default::default()
                }),
                ..spec("q")
            }],
            Code::InvalidArgument,
            "tasks[0].retry.initial_backoff",
        ),
        (
            vec![pb::TaskSpec {
                retry: Some(pb::RetryPolicy {
                    jitter: Some(1.5),
                    ..Default::default()
                }),
                ..spec("q")
            }],
            Code::InvalidArgument,
            "tasks[0].retry.jitter",
        ),
        (
            vec![pb::TaskSpec {
                retry: Some(pb::RetryPolicy {
                    backoff_multiplier: 0.5,
                    ..Default::default()
                }),
                ..spec("q")
            }],
            Code::InvalidArgument,
            "tasks[0].retry.backoff_multiplier",
        ),
        (
            vec![pb::TaskSpec {
                retry: Some(pb::RetryPolicy {
                    max_attempts: 1_000_000,
                    ..Default::default()
                }),
                ..spec("q")
            }],
            Code::InvalidArgument,
            "tasks[0].retry.max_attempts",
        ),
        (
            vec![pb::TaskSpec {
                deadline: ts(now - chrono::Duration::seconds(5)),
                ..spec("q")
            }],
            Code::InvalidArgument,
            "tasks[0].deadline",
        ),
        (
            vec![pb::TaskSpec {
                run_at: Some(prost_types::Timestamp {
                    seconds: i64::MAX,
                    nanos: 0,
                }),
                ..spec("q")
            }],
            Code::InvalidArgument,
            "tasks[0].run_at",
        ),
        (
            vec![
                spec("q"),
                pb::TaskSpec {
                    key: "order\0 42".into(),
                    ..spec("q")
                },
            ],
            Code::InvalidArgument,
            "tasks[1].key",
        ),
    ];
    for (tasks, code, field) in cases {
        check(c.submit(pb::SubmitRequest { tasks }).await, code, field);
    }
    let stored = admin
        .list_tasks(pb::ListTasksRequest::default())
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert!(stored.is_empty(), "nothing stored: {stored:?}");
}

async fn lease_and_report_calls_with_bad_fields_are_rejected(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    submit_one(&mut c, spec("q")).await;
    let base = lease_req("q", 1);
    let cases: Vec<(pb::LeaseRequest, &str)> = vec![
        (
            pb::LeaseRequest {
                worker_id: "".into(),
                ..base.clone()
            },
            "worker_id",
        ),
        (
            pb::LeaseRequest {
                queues: vec![],
                ..base.clone()
            },
            "queues",
        ),
        (
            pb::LeaseRequest {
                queues: vec!["q".into(), "bad/name".into()],
                ..base.clone()
            },
            "queues[1]",
        ),
        (
            pb::LeaseRequest {
                worker_id: "w\u{1b}[31m".into(),
                ..base.clone()
            },
            "worker_id",
        ),
        (
            pb::LeaseRequest {
                max_tasks: 0,
                ..base.clone()
            },
            "max_tasks",
        ),
        (
            pb::LeaseRequest {
                max_tasks: 1001,
                ..base.clone()
            },
            "max_tasks",
        ),
        (
            pb::LeaseRequest {
                lease_duration: dur(std::time::Duration::from_millis(500)),
                ..base.clone()
            },
            "lease_duration",
        ),
        (
            pb::LeaseRequest {
                lease_duration: secs(25 * 3600),
                ..base.clone()
            },
            "lease_duration",
        ),
        (
            pb::LeaseRequest {
                wait: secs(61),
                ..base.clone()
            },
            "wait",
        ),
        (
            pb::LeaseRequest {
                wait: Some(prost_types::Duration {
                    seconds: -3,
                    nanos: 0,
                }),
                ..base.clone()
            },
            "wait",
        ),
    ];
    for (req, field) in cases {
        check(c.lease(req).await, Code::InvalidArgument, field);
    }
    // None of the bad leases took the task.
    let t = lease_one(&mut c, "q").await;
    assert_eq!(t.attempt, 1);

    check(
        c.heartbeat(pb::HeartbeatRequest {
            worker_id: "w1".into(),
            leases: vec![pb::LeaseRef {
                task_id: t.task_id.clone(),
                lease_token: t.lease_token.clone(),
            }],
            extend_by: secs(0),
        })
        .await,
        Code::InvalidArgument,
        "extend_by",
    );
    check(
        c.heartbeat(pb::HeartbeatRequest {
            worker_id: "w1".into(),
            leases: vec![pb::LeaseRef {
                task_id: t.task_id.clone(),
                lease_token: "tok\0".into(),
            }],
            extend_by: None,
        })
        .await,
        Code::InvalidArgument,
        "leases[0].lease_token",
    );
    check(
        c.complete_many(pb::CompleteManyRequest {
            completions: vec![
                pb::CompleteRequest {
                    task_id: t.task_id.clone(),
                    lease_token: t.lease_token.clone(),
                    result: vec![],
                    lease_next: None,
                },
                pb::CompleteRequest {
                    task_id: t.task_id.clone(),
                    lease_token: "\0".into(),
                    result: vec![],
                    lease_next: None,
                },
            ],
            lease_next: None,
        })
        .await,
        Code::InvalidArgument,
        "completions[1].lease_token",
    );
    check(
        c.complete(pb::CompleteRequest {
            task_id: "".into(),
            lease_token: t.lease_token.clone(),
            result: vec![],
            lease_next: None,
        })
        .await,
        Code::InvalidArgument,
        "task_id",
    );
    check(
        c.complete(pb::CompleteRequest {
            task_id: t.task_id.clone(),
            lease_token: t.lease_token.clone(),
            result: vec![0; (1 << 20) + 1],
            lease_next: None,
        })
        .await,
        Code::ResourceExhausted,
        "result",
    );
    check(
        c.fail(pb::FailRequest {
            task_id: t.task_id.clone(),
            lease_token: "".into(),
            ..Default::default()
        })
        .await,
        Code::InvalidArgument,
        "lease_token",
    );
    // The lease is intact after all of that.
    c.complete(pb::CompleteRequest {
        task_id: t.task_id,
        lease_token: t.lease_token,
        result: vec![],
        lease_next: None,
    })
    .await
    .expect("the lease survived the bad calls");
}

async fn admin_calls_with_bad_fields_are_rejected(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let id = submit_one(&mut c, spec("q")).await;
    check(
        admin
            .get_task(pb::GetTaskRequest {
                task_id: "missing".into(),
            })
            .await,
        Code::NotFound,
        "missing",
    );
    check(
        admin
            .list_tasks(pb::ListTasksRequest {
                page_size: 1001,
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
        "page_size",
    );
    check(
        admin
            .list_tasks(pb::ListTasksRequest {
                page_token: "garbage".into(),
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
        "page_token",
    );
    // Page tokens made by hand: out-of-range or malformed positions, and tokens of
    // the other kind of list (with and without a creation-time range).
    let token = |text: &str| {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
    };
    let range = Some(prost_types::Timestamp {
        seconds: 1,
        nanos: 0,
    });
    for (text, created_after) in [
        ("v3:9223372036854775807:1", None),
        ("v3:1:x", None),
        ("v3:1", None),
        ("v9:1:1", None),
        ("v3:1:1", range),
        ("v2:1:1", None),
        ("v1:1", range),
    ] {
        check(
            admin
                .list_tasks(pb::ListTasksRequest {
                    page_token: token(text),
                    created_after,
                    ..Default::default()
                })
                .await,
            Code::InvalidArgument,
            "page_token",
        );
    }
    // A token of the earlier order (a sequence number alone) is still served.
    let old = admin
        .list_tasks(pb::ListTasksRequest {
            page_token: token(&format!("v1:{}", i64::MAX)),
            ..Default::default()
        })
        .await
        .expect("a token of the earlier order");
    assert!(
        !old.into_inner().tasks.is_empty(),
        "every task is before seq i64::MAX"
    );
    check(
        admin
            .list_tasks(pb::ListTasksRequest {
                states: vec![42],
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
        "states[0]",
    );
    // The target and metadata filters: the longest worker id plus one, a bad label,
    // a value without its key, a key the stores cannot read as a path label.
    for (req, field) in [
        (
            pb::ListTasksRequest {
                target_worker_id: "w".repeat(257),
                ..Default::default()
            },
            "target_worker_id",
        ),
        (
            pb::ListTasksRequest {
                target_labels: [("bad key".to_string(), "v".to_string())].into(),
                ..Default::default()
            },
            "target_labels",
        ),
        (
            pb::ListTasksRequest {
                metadata_value: "acme".into(),
                ..Default::default()
            },
            "metadata_value",
        ),
        (
            pb::ListTasksRequest {
                metadata_key: "ten\"ant".into(),
                ..Default::default()
            },
            "metadata_key",
        ),
        (
            pb::ListTasksRequest {
                metadata_key: "k".repeat(257),
                ..Default::default()
            },
            "metadata_key",
        ),
        (
            pb::ListTasksRequest {
                metadata_key: "tenant".into(),
                metadata_value: "v".repeat(4097),
                ..Default::default()
            },
            "metadata_value",
        ),
    ] {
        check(admin.list_tasks(req).await, Code::InvalidArgument, field);
    }
    check(
        admin
            .update_task(pb::UpdateTaskRequest {
                task_id: id.clone(),
                priority: 9,
                update_mask: None,
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
        "update_mask",
    );
    check(
        admin
            .update_task(pb::UpdateTaskRequest {
                task_id: id.clone(),
                update_mask: Some(prost_types::FieldMask {
                    paths: vec!["payload".into()],
                }),
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
        "update_mask",
    );
    check(
        admin
            .update_task(pb::UpdateTaskRequest {
                task_id: id.clone(),
                max_attempts: 0,
                update_mask: Some(prost_types::FieldMask {
                    paths: vec!["max_attempts".into()],
                }),
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
        "max_attempts",
    );
    // A new target is checked as Submit's: the longest worker id plus one, too many
    // labels, an empty label key; none of them changes the task.
    let retarget = |target: pb::Target| pb::UpdateTaskRequest {
        task_id: id.clone(),
        target: Some(target),
        update_mask: Some(prost_types::FieldMask {
            paths: vec!["target".into()],
        }),
        ..Default::default()
    };
    check(
        admin
            .update_task(retarget(pb::Target {
                worker_id: "w".repeat(257),
                ..Default::default()
            }))
            .await,
        Code::InvalidArgument,
        "target.worker_id",
    );
    check(
        admin
            .update_task(retarget(pb::Target {
                labels: (0..100).map(|i| (format!("k{i}"), "v".into())).collect(),
                ..Default::default()
            }))
            .await,
        Code::InvalidArgument,
        "target.labels",
    );
    check(
        admin
            .update_task(retarget(pb::Target {
                labels: [(String::new(), "v".into())].into(),
                ..Default::default()
            }))
            .await,
        Code::InvalidArgument,
        "target.labels",
    );
    let unchanged = get(&mut admin, &id).await;
    assert_eq!(unchanged.priority, 0, "unchanged");
    assert_eq!(unchanged.target, None, "target unchanged");
}

all_backends!(
    submits_with_bad_fields_are_rejected_and_store_nothing,
    lease_and_report_calls_with_bad_fields_are_rejected,
    admin_calls_with_bad_fields_are_rejected,
);
