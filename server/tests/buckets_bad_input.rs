//! Hostile callers of limit buckets and cooldowns: the longest names, names
//! out of their alphabet, the broker's own metadata entry, unknown buckets,
//! cooldowns of a key or bucket the task does not have, durations out of
//! range, and a stale lease. Each is refused naming its field and changes
//! nothing, or is shown to do only what the rules say.

mod common;
#[path = "buckets/helpers.rs"]
mod helpers;

use std::time::Duration;

use common::*;
use helpers::*;
use taskbroker_client::pb;
use tonic::Code;

async fn bucket_names_are_bounded_everywhere(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    let longest = "b".repeat(128);
    set_bucket(&mut admin, &longest, 5.0, 0, 0).await;
    let id = submit_one(&mut c, in_bucket("q", &longest)).await;
    assert_eq!(get(&mut admin, &id).await.bucket, longest);
    for bad in ["b".repeat(129), "a b".into(), "é".into()] {
        let e = c
            .submit(pb::SubmitRequest {
                tasks: vec![in_bucket("q", &bad)],
            })
            .await
            .expect_err("refused");
        assert_eq!(e.code(), Code::InvalidArgument);
        assert_eq!(bad_field(&e).as_deref(), Some("tasks[0].bucket"));
        let e = admin
            .update_bucket(pb::UpdateBucketRequest {
                name: bad.clone(),
                config: Some(pb::BucketConfig::default()),
                update_mask: Some(prost_types::FieldMask {
                    paths: vec!["max_concurrent".into()],
                }),
            })
            .await
            .expect_err("refused");
        assert_eq!(bad_field(&e).as_deref(), Some("name"));
        let e = admin
            .update_queue(pb::UpdateQueueRequest {
                name: "q".into(),
                config: Some(pb::QueueConfig {
                    bucket: bad.clone(),
                    ..Default::default()
                }),
                update_mask: Some(prost_types::FieldMask {
                    paths: vec!["bucket".into()],
                }),
            })
            .await
            .expect_err("refused");
        assert_eq!(bad_field(&e).as_deref(), Some("config.bucket"));
    }
    // The broker's own entry cannot be set by hand to dodge or borrow a bucket.
    let mut t = spec("q");
    t.metadata
        .insert("taskbroker.bucket".into(), longest.clone());
    let e = c
        .submit(pb::SubmitRequest { tasks: vec![t] })
        .await
        .expect_err("refused");
    assert_eq!(bad_field(&e).as_deref(), Some("tasks[0].metadata"));
    // Only the one task above was stored.
    let listed = admin
        .list_buckets(pb::ListBucketsRequest {})
        .await
        .expect("list")
        .into_inner()
        .buckets;
    assert_eq!(listed.len(), 1);
    app.shutdown().await;
}

async fn bucket_settings_out_of_range_are_refused(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let mut admin = app.admin().await;
    for (per_second, field) in [
        (0.0, "config.rate_limit.per_second"),
        (-1.0, "config.rate_limit.per_second"),
        (f64::NAN, "config.rate_limit.per_second"),
        (1e7, "config.rate_limit.per_second"),
    ] {
        let e = admin
            .update_bucket(pb::UpdateBucketRequest {
                name: "b".into(),
                config: Some(pb::BucketConfig {
                    rate_limit: Some(pb::RateLimit {
                        per_second,
                        burst: u32::MAX,
                    }),
                    max_concurrent: u32::MAX,
                }),
                update_mask: Some(prost_types::FieldMask {
                    paths: vec!["rate_limit".into()],
                }),
            })
            .await
            .expect_err("refused");
        assert_eq!(bad_field(&e).as_deref(), Some(field));
    }
    let e = admin
        .update_bucket(pb::UpdateBucketRequest {
            name: "b".into(),
            config: Some(pb::BucketConfig::default()),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["paused".into()],
            }),
        })
        .await
        .expect_err("refused");
    assert_eq!(bad_field(&e).as_deref(), Some("update_mask"));
    let e = admin
        .update_bucket(pb::UpdateBucketRequest {
            name: "b".into(),
            config: None,
            update_mask: None,
        })
        .await
        .expect_err("refused");
    assert_eq!(bad_field(&e).as_deref(), Some("update_mask"));
    // Nothing was defined; an unknown bucket is NOT_FOUND.
    let e = admin
        .get_bucket(pb::GetBucketRequest { name: "b".into() })
        .await
        .expect_err("unknown");
    assert_eq!(e.code(), Code::NotFound);
    let e = admin
        .delete_bucket(pb::DeleteBucketRequest { name: "b".into() })
        .await
        .expect_err("unknown");
    assert_eq!(e.code(), Code::NotFound);
    // The largest limits are kept as given.
    let b = set_bucket(&mut admin, "b", 1e6, u32::MAX, u32::MAX).await;
    let cfg = b.config.expect("config");
    assert_eq!(cfg.max_concurrent, u32::MAX);
    assert_eq!(cfg.rate_limit.expect("rate").burst, u32::MAX);
    app.shutdown().await;
}

async fn an_undefined_bucket_limits_nothing_until_it_is_defined(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    submit(&mut c, (0..6).map(|_| in_bucket("q", "later")).collect()).await;
    assert_eq!(lease(&mut c, "q", 2).await.len(), 2);
    // Defined now: the two leases held count against it.
    set_bucket(&mut admin, "later", 0.0, 0, 3).await;
    assert_eq!(lease(&mut c, "q", 10).await.len(), 1);
    // Deleted: its tasks lease without it.
    admin
        .delete_bucket(pb::DeleteBucketRequest {
            name: "later".into(),
        })
        .await
        .expect("delete");
    assert_eq!(lease(&mut c, "q", 10).await.len(), 3);
    app.shutdown().await;
}

async fn a_cooldown_must_fit_the_leased_task(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    submit(&mut c, vec![spec("q"), keyed("q", "k")]).await;
    let plain = lease_one(&mut c, "q").await;
    let ten = Duration::from_secs(10);
    let cases = [
        (
            cooldown(pb::CooldownScope::ConcurrencyKey, ten),
            "cooldown.scope",
        ),
        (cooldown(pb::CooldownScope::Bucket, ten), "cooldown.scope"),
        (
            cooldown(pb::CooldownScope::Unspecified, ten),
            "cooldown.scope",
        ),
        (
            Some(pb::Cooldown {
                scope: 99,
                duration: dur(ten),
            }),
            "cooldown.scope",
        ),
        (
            Some(pb::Cooldown {
                scope: pb::CooldownScope::ConcurrencyKey as i32,
                duration: None,
            }),
            "cooldown.duration",
        ),
    ];
    for (cd, field) in cases {
        let e = fail_with(&mut c, &plain, cd).await.expect_err("refused");
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert_eq!(bad_field(&e).as_deref(), Some(field), "{e:?}");
    }
    let keyed_task = lease_one(&mut c, "q").await;
    for d in [
        Duration::ZERO,
        Duration::from_secs(3601),
        Duration::from_secs(u32::MAX as u64 * 1000),
    ] {
        let e = fail_with(
            &mut c,
            &keyed_task,
            cooldown(pb::CooldownScope::ConcurrencyKey, d),
        )
        .await
        .expect_err("refused");
        assert_eq!(bad_field(&e).as_deref(), Some("cooldown.duration"), "{e:?}");
    }
    // A negative duration.
    let e = fail_with(
        &mut c,
        &keyed_task,
        Some(pb::Cooldown {
            scope: pb::CooldownScope::ConcurrencyKey as i32,
            duration: Some(prost_types::Duration {
                seconds: -1,
                nanos: 0,
            }),
        }),
    )
    .await
    .expect_err("refused");
    assert_eq!(e.code(), Code::InvalidArgument);
    // Nothing was set, and both leases are still held.
    assert!(cooldowns(&mut admin).await.is_empty());
    for t in [&plain, &keyed_task] {
        assert_eq!(
            state(&get(&mut admin, &t.task_id).await),
            pb::TaskState::Leased
        );
    }
    // The maximum itself is accepted.
    fail_with(
        &mut c,
        &keyed_task,
        cooldown(pb::CooldownScope::ConcurrencyKey, Duration::from_secs(3600)),
    )
    .await
    .expect("the maximum");
    assert_eq!(cooldowns(&mut admin).await.len(), 1);
    app.shutdown().await;
}

async fn a_stale_lease_sets_no_cooldown(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    submit(&mut c, vec![keyed("q", "k"), keyed("q", "k")]).await;
    let t = lease_one(&mut c, "q").await;
    let stale = pb::LeasedTask {
        lease_token: "not-the-token".into(),
        ..t.clone()
    };
    let e = fail_with(
        &mut c,
        &stale,
        cooldown(pb::CooldownScope::ConcurrencyKey, Duration::from_secs(60)),
    )
    .await
    .expect_err("stale");
    assert_eq!(e.code(), Code::Aborted);
    assert_eq!(error_reason(&e).as_deref(), Some("LEASE_LOST"));
    // Another task's id with this worker's token: the same.
    let other = pb::LeasedTask {
        task_id: "0190aaaa-0000-7000-8000-000000000000".into(),
        ..t.clone()
    };
    let e = fail_with(
        &mut c,
        &other,
        cooldown(pb::CooldownScope::ConcurrencyKey, Duration::from_secs(60)),
    )
    .await
    .expect_err("not this worker's");
    assert_eq!(e.code(), Code::Aborted);
    assert!(cooldowns(&mut admin).await.is_empty());
    // The key's other task leases as if nothing had been asked.
    complete(&mut c, &t).await;
    assert_eq!(lease(&mut c, "q", 10).await.len(), 1);
    app.shutdown().await;
}

async fn lift_cooldown_names_one_thing(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let mut admin = app.admin().await;
    let bad = [
        pb::LiftCooldownRequest::default(),
        pb::LiftCooldownRequest {
            queue: "q".into(),
            ..Default::default()
        },
        pb::LiftCooldownRequest {
            queue: "q".into(),
            concurrency_key: "k".into(),
            bucket: "b".into(),
        },
    ];
    for r in bad {
        let e = admin.lift_cooldown(r).await.expect_err("refused");
        assert_eq!(e.code(), Code::InvalidArgument);
    }
    let e = admin
        .lift_cooldown(pb::LiftCooldownRequest {
            queue: "q".into(),
            concurrency_key: "k".repeat(257),
            bucket: String::new(),
        })
        .await
        .expect_err("refused");
    assert_eq!(bad_field(&e).as_deref(), Some("concurrency_key"));
    let e = admin
        .list_cooldowns(pb::ListCooldownsRequest {
            queue: String::new(),
            bucket: "b".repeat(129),
        })
        .await
        .expect_err("refused");
    assert_eq!(bad_field(&e).as_deref(), Some("bucket"));
    // A key nobody cooled: nothing to lift.
    let lifted = admin
        .lift_cooldown(pb::LiftCooldownRequest {
            queue: "q".into(),
            concurrency_key: "k".into(),
            bucket: String::new(),
        })
        .await
        .expect("lift")
        .into_inner()
        .lifted;
    assert!(!lifted);
    app.shutdown().await;
}

all_backends!(
    bucket_names_are_bounded_everywhere,
    bucket_settings_out_of_range_are_refused,
    an_undefined_bucket_limits_nothing_until_it_is_defined,
    a_cooldown_must_fit_the_leased_task,
    a_stale_lease_sets_no_cooldown,
    lift_cooldown_names_one_thing,
);
