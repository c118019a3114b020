//! Admission end to end on both stores: live queue settings (GetQueue,
//! ListQueues, UpdateQueue), and each gate of the lease path alone and combined
//! (pause/resume, max_concurrent, per-key limits, rate limits, round robin,
//! priority aging). Explain is in `admission_explain.rs`; replicas sharing
//! limits in `admission_replicas.rs`.

mod common;
#[path = "admission/helpers.rs"]
mod helpers;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use helpers::*;
use taskbroker_client::pb;

async fn settings_are_read_changed_by_mask_and_listed(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut admin = app.admin().await;
    // A queue without stored settings answers the broker's defaults.
    let q = get_queue(&mut admin, "mail").await;
    let c = q.config.unwrap();
    assert!(!c.paused);
    assert_eq!(c.max_concurrent, 0);
    assert_eq!(c.default_retry.unwrap().max_attempts, 3);
    assert!(q.update_time.is_none());

    let q = set_queue(
        &mut admin,
        "mail",
        pb::QueueConfig {
            max_concurrent: 10,
            rate_limit: Some(pb::RateLimit {
                per_second: 50.0,
                burst: 5,
            }),
            default_retry: Some(pb::RetryPolicy {
                max_attempts: 7,
                ..Default::default()
            }),
            paused: true,
            ..Default::default()
        },
        &["max_concurrent", "rate_limit", "default_retry.max_attempts"],
    )
    .await;
    let c = q.config.unwrap();
    assert_eq!(c.max_concurrent, 10);
    assert_eq!(c.rate_limit.unwrap().burst, 5);
    assert_eq!(c.default_retry.unwrap().max_attempts, 7);
    // Not named in the mask: unchanged.
    assert!(!c.paused);
    assert!(q.update_time.is_some());

    // The live retry default applies to new tasks at once.
    let mut broker = app.broker().await;
    let id = submit_one(&mut broker, spec("mail")).await;
    assert_eq!(get(&mut admin, &id).await.max_attempts, 7);

    // Zero in a named field goes back to the default.
    let q = set_queue(
        &mut admin,
        "mail",
        pb::QueueConfig::default(),
        &["max_concurrent"],
    )
    .await;
    assert_eq!(q.config.unwrap().max_concurrent, 0);

    let names: Vec<String> = admin
        .list_queues(pb::ListQueuesRequest {})
        .await
        .unwrap()
        .into_inner()
        .queues
        .into_iter()
        .map(|q| q.name)
        .collect();
    assert_eq!(names, ["mail"]);
    app.shutdown().await;
}

async fn bad_updates_name_their_field_and_change_nothing(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut admin = app.admin().await;
    let cases: Vec<(pb::QueueConfig, Vec<&str>, &str)> = vec![
        (pb::QueueConfig::default(), vec![], "update_mask"),
        (pb::QueueConfig::default(), vec!["colour"], "update_mask"),
        (
            pb::QueueConfig {
                rate_limit: Some(pb::RateLimit {
                    per_second: -1.0,
                    burst: 0,
                }),
                ..Default::default()
            },
            vec!["rate_limit"],
            "config.rate_limit.per_second",
        ),
        (
            pb::QueueConfig {
                fairness: 42,
                ..Default::default()
            },
            vec!["fairness"],
            "config.fairness",
        ),
        (
            pb::QueueConfig {
                min_lease: secs(600),
                max_lease: secs(60),
                ..Default::default()
            },
            vec!["min_lease", "max_lease"],
            "config.min_lease",
        ),
        (
            pb::QueueConfig {
                default_retry: Some(pb::RetryPolicy {
                    jitter: Some(3.0),
                    ..Default::default()
                }),
                ..Default::default()
            },
            vec!["default_retry"],
            "config.default_retry.jitter",
        ),
    ];
    for (config, mask, field) in cases {
        let err = admin
            .update_queue(update("q", config, &mask))
            .await
            .expect_err("rejected");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{field}");
        assert_eq!(bad_field(&err).as_deref(), Some(field));
    }
    let err = admin
        .update_queue(update("bad name!", pb::QueueConfig::default(), &["paused"]))
        .await
        .expect_err("rejected");
    assert_eq!(bad_field(&err).as_deref(), Some("name"));
    let err = app
        .broker()
        .await
        .submit(pb::SubmitRequest {
            tasks: vec![pb::TaskSpec {
                concurrency_key: "a key".into(),
                ..spec("q")
            }],
        })
        .await
        .expect_err("rejected");
    assert_eq!(bad_field(&err).as_deref(), Some("tasks[0].concurrency_key"));
    // Nothing was stored.
    let listed = admin
        .list_queues(pb::ListQueuesRequest {})
        .await
        .unwrap()
        .into_inner()
        .queues;
    assert!(listed.is_empty(), "{listed:?}");
    app.shutdown().await;
}

async fn pause_stops_leases_and_resume_wakes_a_waiting_long_poll(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    submit(&mut broker, vec![spec("q"), spec("q")]).await;
    let held = lease_one(&mut broker, "q").await;
    pause(&mut admin, "q", true).await;
    assert!(lease(&mut broker, "q", 10).await.is_empty());
    // The lease held before the pause runs on and completes.
    complete(&mut broker, &held).await;

    let mut waiter = app.broker().await;
    let poll = tokio::spawn(async move {
        waiter
            .lease(pb::LeaseRequest {
                wait: secs(20),
                ..lease_req("q", 1)
            })
            .await
            .unwrap()
            .into_inner()
            .tasks
    });
    app.until_waiting(1).await;
    pause(&mut admin, "q", false).await;
    let got = poll.await.unwrap();
    assert_eq!(got.len(), 1, "the resume woke the long-poll");
    app.shutdown().await;
}

async fn max_concurrent_counts_leases_held(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    submit(&mut broker, (0..10).map(|_| spec("q")).collect()).await;
    set_queue(
        &mut admin,
        "q",
        pb::QueueConfig {
            max_concurrent: 3,
            ..Default::default()
        },
        &["max_concurrent"],
    )
    .await;
    let first = lease(&mut broker, "q", 10).await;
    assert_eq!(first.len(), 3);
    assert!(lease(&mut broker, "q", 10).await.is_empty());
    complete(&mut broker, &first[0]).await;
    assert_eq!(lease(&mut broker, "q", 10).await.len(), 1);
    app.shutdown().await;
}

async fn a_full_key_never_blocks_the_keys_behind_it(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    set_queue(
        &mut admin,
        "q",
        pb::QueueConfig {
            max_concurrent_per_key: 1,
            ..Default::default()
        },
        &["max_concurrent_per_key"],
    )
    .await;
    // Key a first (and many of it), then b, then one without a key.
    let mut tasks: Vec<pb::TaskSpec> = (0..50).map(|_| keyed("q", "a")).collect();
    tasks.push(keyed("q", "b"));
    tasks.push(spec("q"));
    submit(&mut broker, tasks).await;
    let got = lease(&mut broker, "q", 10).await;
    let keys: Vec<&str> = got.iter().map(|t| t.concurrency_key.as_str()).collect();
    assert_eq!(keys, ["a", "b", ""]);
    // a is held: a lease finds nothing of a, even with a's 49 tasks first in line.
    assert!(lease(&mut broker, "q", 10).await.is_empty());
    complete(&mut broker, &got[0]).await;
    let next = lease(&mut broker, "q", 10).await;
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].concurrency_key, "a");
    app.shutdown().await;
}

async fn per_key_limit_one_with_100_keys_and_8_workers_never_runs_a_key_twice(b: Backend) {
    let Some(app) = spawn_app_with(
        b,
        Options {
            manual_clock: false,
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    set_queue(
        &mut admin,
        "q",
        pb::QueueConfig {
            max_concurrent_per_key: 1,
            ..Default::default()
        },
        &["max_concurrent_per_key"],
    )
    .await;
    let mut ids = Vec::new();
    for round in 0..4 {
        let tasks = (0..100).map(|k| keyed("q", &format!("user-{k}"))).collect();
        ids.extend(submit(&mut broker, tasks).await);
        let _ = round;
    }
    let report = run_workers(&[&app], "q", 8, 4, ids.len()).await;
    assert_eq!(report.max_in_flight_per_key, 1, "a key ran twice at once");
    assert_eq!(
        report.completed,
        ids.iter().cloned().collect::<HashSet<_>>()
    );
    app.shutdown().await;
}

async fn a_rate_limit_holds_within_ten_percent_over_ten_seconds(b: Backend) {
    let Some(app) = spawn_app_with(
        b,
        Options {
            manual_clock: false,
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    let rate = 20.0;
    set_queue(
        &mut admin,
        "q",
        pb::QueueConfig {
            // The default burst: one second's worth (20).
            rate_limit: Some(pb::RateLimit {
                per_second: rate,
                burst: 0,
            }),
            ..Default::default()
        },
        &["rate_limit"],
    )
    .await;
    for _ in 0..2 {
        submit(&mut broker, (0..500).map(|_| spec("q")).collect()).await;
    }
    let (leases, elapsed) = lease_for(&app, "q", 8, Duration::from_secs(10)).await;
    // The full bucket at the start, then the rate.
    let expected = rate * elapsed.as_secs_f64() + rate;
    let n = leases as f64;
    assert!(
        (n - expected).abs() <= expected * 0.1,
        "{n} leases in {elapsed:?}, expected {expected:.0} +/- 10%"
    );
    app.shutdown().await;
}

async fn round_robin_lets_a_small_tenant_through_a_flood(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    set_queue(
        &mut admin,
        "q",
        pb::QueueConfig {
            fairness: pb::Fairness::RoundRobinKeys as i32,
            ..Default::default()
        },
        &["fairness"],
    )
    .await;
    for _ in 0..10 {
        submit(
            &mut broker,
            (0..1000).map(|_| keyed("q", "tenant-a")).collect(),
        )
        .await;
    }
    let b_ids: HashSet<String> = submit(
        &mut broker,
        (0..10).map(|_| keyed("q", "tenant-b")).collect(),
    )
    .await
    .into_iter()
    .collect();
    let mut done_b = 0;
    let mut leases = 0;
    while done_b < b_ids.len() {
        let got = lease(&mut broker, "q", 4).await;
        assert!(!got.is_empty());
        for t in got {
            leases += 1;
            if b_ids.contains(&t.task_id) {
                done_b += 1;
            }
            complete(&mut broker, &t).await;
        }
        assert!(
            leases <= 200,
            "tenant b waited past 200 leases ({done_b} done)"
        );
    }
    app.shutdown().await;
}

async fn aging_lifts_a_low_priority_task_past_a_stream(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    set_queue(
        &mut admin,
        "q",
        pb::QueueConfig {
            priority_aging: secs(1),
            ..Default::default()
        },
        &["priority_aging"],
    )
    .await;
    let low = submit_one(
        &mut broker,
        pb::TaskSpec {
            priority: -10,
            ..spec("q")
        },
    )
    .await;
    // A stream of priority 0: one new task per second, one lease per second.
    let mut leased_at = None;
    for step in 0..30 {
        submit_one(&mut broker, spec("q")).await;
        app.advance(Duration::from_secs(1));
        let t = lease_one(&mut broker, "q").await;
        complete(&mut broker, &t).await;
        if t.task_id == low {
            leased_at = Some(step);
            break;
        }
    }
    let step = leased_at.expect("the low-priority task was never leased");
    // It needs 10 steps of aging to tie with a fresh priority-0 task.
    assert!((9..=11).contains(&step), "leased at step {step}");
    app.shutdown().await;
}

async fn without_aging_a_stream_starves_the_low_priority_task(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut broker = app.broker().await;
    let low = submit_one(
        &mut broker,
        pb::TaskSpec {
            priority: -10,
            ..spec("q")
        },
    )
    .await;
    for _ in 0..20 {
        submit_one(&mut broker, spec("q")).await;
        app.advance(Duration::from_secs(1));
        let t = lease_one(&mut broker, "q").await;
        assert_ne!(t.task_id, low);
        complete(&mut broker, &t).await;
    }
    app.shutdown().await;
}

async fn gates_combine(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    set_queue(
        &mut admin,
        "q",
        pb::QueueConfig {
            max_concurrent: 4,
            max_concurrent_per_key: 2,
            per_key_rate_limit: Some(pb::RateLimit {
                per_second: 1.0,
                burst: 3,
            }),
            fairness: pb::Fairness::RoundRobinKeys as i32,
            priority_aging: secs(60),
            ..Default::default()
        },
        &[
            "max_concurrent",
            "max_concurrent_per_key",
            "per_key_rate_limit",
            "fairness",
            "priority_aging",
        ],
    )
    .await;
    let mut tasks: Vec<pb::TaskSpec> = (0..20).map(|_| keyed("q", "a")).collect();
    tasks.extend((0..20).map(|_| keyed("q", "b")));
    submit(&mut broker, tasks).await;
    // max_concurrent 4, two per key (a round-robin reply lists its tasks in
    // turn order).
    let got = lease(&mut broker, "q", 10).await;
    let keys: Vec<&str> = got.iter().map(|t| t.concurrency_key.as_str()).collect();
    assert_eq!(keys, ["a", "b", "a", "b"]);
    for t in &got {
        complete(&mut broker, t).await;
    }
    // Each key has one token left of its burst of 3 (the clock stands still).
    let got = lease(&mut broker, "q", 10).await;
    let keys: Vec<&str> = got.iter().map(|t| t.concurrency_key.as_str()).collect();
    assert_eq!(keys, ["a", "b"]);
    for t in &got {
        complete(&mut broker, t).await;
    }
    assert!(lease(&mut broker, "q", 10).await.is_empty());
    // One second later each key has one more token.
    app.advance(Duration::from_secs(1));
    assert_eq!(lease(&mut broker, "q", 10).await.len(), 2);
    app.shutdown().await;
}

async fn the_configuration_seeds_the_queue_settings(b: Backend) {
    let Some(db) = test_db(b).await else {
        return;
    };
    let db = std::sync::Arc::new(db);
    let mut settings = taskbroker_server::service::Settings::default();
    settings.gates.insert(
        "q".into(),
        taskbroker_server::domain::admission::QueueConfig {
            paused: true,
            ..Default::default()
        },
    );
    let app = spawn_on(
        db.clone(),
        Options {
            settings,
            ..Options::default()
        },
    )
    .await;
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    assert!(get_queue(&mut admin, "q").await.config.unwrap().paused);
    submit_one(&mut broker, spec("q")).await;
    assert!(lease(&mut broker, "q", 1).await.is_empty());
    // An operator's change outlives a restart with the same configuration.
    pause(&mut admin, "q", false).await;
    app.shutdown().await;
    let mut settings = taskbroker_server::service::Settings::default();
    settings.gates.insert(
        "q".into(),
        taskbroker_server::domain::admission::QueueConfig {
            paused: true,
            ..Default::default()
        },
    );
    let app = spawn_on(
        db,
        Options {
            settings,
            ..Options::default()
        },
    )
    .await;
    let mut broker = app.broker().await;
    assert_eq!(lease(&mut broker, "q", 1).await.len(), 1);
    app.shutdown().await;
}

/// The per-worker cap (routing) is a live queue setting: UpdateQueue changes the
/// cap the next Lease enforces, with or without other gates.
async fn the_per_worker_cap_is_a_live_setting(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    for _ in 0..6 {
        submit_one(&mut broker, spec("q")).await;
    }
    let cap = |n: u32| pb::QueueConfig {
        max_leases_per_worker: n,
        ..Default::default()
    };
    set_queue(&mut admin, "q", cap(2), &["max_leases_per_worker"]).await;
    assert_eq!(lease(&mut broker, "q", 10).await.len(), 2);
    assert!(lease(&mut broker, "q", 10).await.is_empty());
    set_queue(&mut admin, "q", cap(3), &["max_leases_per_worker"]).await;
    assert_eq!(lease(&mut broker, "q", 10).await.len(), 1);
    app.shutdown().await;
}

all_backends!(
    settings_are_read_changed_by_mask_and_listed,
    the_per_worker_cap_is_a_live_setting,
    bad_updates_name_their_field_and_change_nothing,
    pause_stops_leases_and_resume_wakes_a_waiting_long_poll,
    max_concurrent_counts_leases_held,
    a_full_key_never_blocks_the_keys_behind_it,
    per_key_limit_one_with_100_keys_and_8_workers_never_runs_a_key_twice,
    a_rate_limit_holds_within_ten_percent_over_ten_seconds,
    round_robin_lets_a_small_tenant_through_a_flood,
    aging_lifts_a_low_priority_task_past_a_stream,
    without_aging_a_stream_starves_the_low_priority_task,
    gates_combine,
    the_configuration_seeds_the_queue_settings,
);
