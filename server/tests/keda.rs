//! KEDA's external scaler protocol against a live broker, called as KEDA calls it:
//! an empty queue is inactive, submitted work makes it active with the backlog as
//! the metric, StreamIsActive pushes each change, and tokens travel in the metadata.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use taskbroker_client::pb;
use taskbroker_server::api::auth::{Role, TokenEntry};
use taskbroker_server::keda::external_scaler_client::ExternalScalerClient;
use taskbroker_server::keda::{GetMetricsRequest, ScaledObjectRef};
use tonic::Code;
use tonic::transport::Channel;

async fn scaler(app: &TestApp) -> ExternalScalerClient<Channel> {
    ExternalScalerClient::connect(app.url()).await.unwrap()
}

fn object(meta: &[(&str, &str)]) -> ScaledObjectRef {
    ScaledObjectRef {
        name: "emails-worker".into(),
        namespace: "tasks".into(),
        scaler_metadata: meta
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>(),
    }
}

async fn metric(c: &mut ExternalScalerClient<Channel>, obj: &ScaledObjectRef, name: &str) -> f64 {
    let r = c
        .get_metrics(GetMetricsRequest {
            scaled_object_ref: Some(obj.clone()),
            metric_name: name.into(),
        })
        .await
        .expect("get metrics")
        .into_inner();
    assert_eq!(r.metric_values.len(), 1);
    assert_eq!(r.metric_values[0].metric_name, name);
    r.metric_values[0].metric_value_float
}

async fn active(c: &mut ExternalScalerClient<Channel>, obj: &ScaledObjectRef) -> bool {
    c.is_active(obj.clone())
        .await
        .expect("is active")
        .into_inner()
        .result
}

async fn a_worker_deployment_scales_from_zero_on_work_and_back(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let mut k = scaler(&app).await;
    let obj = object(&[
        ("scalerAddress", "taskbroker.tasks.svc:50051"),
        ("queue", "emails"),
        ("targetReadyPerReplica", "2"),
        ("targetOldestAgeSeconds", "60"),
    ]);

    // The HPA's view: two metrics with their targets.
    let specs = k.get_metric_spec(obj.clone()).await.unwrap().into_inner();
    let names: Vec<_> = specs
        .metric_specs
        .iter()
        .map(|s| (s.metric_name.as_str(), s.target_size_float, s.target_size))
        .collect();
    assert_eq!(
        names,
        [
            ("taskbroker-backlog", 2.0, 2),
            ("taskbroker-oldest-ready-age-seconds", 60.0, 60)
        ]
    );

    // Empty queue: inactive (KEDA scales the workers to zero), backlog 0.
    assert!(!active(&mut k, &obj).await);
    assert_eq!(metric(&mut k, &obj, "taskbroker-backlog").await, 0.0);
    let mut stream = k.stream_is_active(obj.clone()).await.unwrap().into_inner();
    let first = stream
        .message()
        .await
        .unwrap()
        .expect("the current value at once");
    assert!(!first.result);

    // Work arrives: active, and the stream says so without being asked.
    let mut c = app.broker().await;
    submit(&mut c, vec![spec("emails"), spec("emails"), spec("emails")]).await;
    submit(&mut c, vec![spec("other")]).await;
    assert!(active(&mut k, &obj).await);
    assert_eq!(metric(&mut k, &obj, "taskbroker-backlog").await, 3.0);
    let change = tokio::time::timeout(Duration::from_secs(30), stream.message())
        .await
        .expect("the stream reports the change")
        .unwrap()
        .expect("a message");
    assert!(change.result);

    // The oldest ready task's age follows the broker's clock.
    app.advance(Duration::from_secs(45));
    assert_eq!(
        metric(&mut k, &obj, "taskbroker-oldest-ready-age-seconds").await,
        45.0
    );

    // Leased tasks still count (busy workers are not scaled away)...
    let leased = lease(&mut c, "emails", 3).await;
    assert_eq!(leased.len(), 3);
    assert_eq!(metric(&mut k, &obj, "taskbroker-backlog").await, 3.0);
    let ready_only = object(&[("queue", "emails"), ("includeLeased", "false")]);
    assert_eq!(metric(&mut k, &ready_only, "taskbroker-backlog").await, 0.0);
    assert!(!active(&mut k, &ready_only).await);
    assert!(active(&mut k, &obj).await);

    // ...until they finish: inactive again, pushed on the stream.
    for t in leased {
        c.complete(pb::CompleteRequest {
            task_id: t.task_id,
            lease_token: t.lease_token,
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let change = tokio::time::timeout(Duration::from_secs(30), stream.message())
        .await
        .expect("the stream reports the change")
        .unwrap()
        .expect("a message");
    assert!(!change.result);
    assert!(!active(&mut k, &obj).await);

    // Several queues add up.
    let both = object(&[("queue", "emails,other")]);
    assert_eq!(metric(&mut k, &both, "taskbroker-backlog").await, 1.0);
    app.shutdown().await;
}

all_backends!(a_worker_deployment_scales_from_zero_on_work_and_back);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_trigger_metadata_is_invalid_argument_naming_the_key() {
    let app = spawn_app(Backend::Sqlite).await.unwrap();
    let mut k = scaler(&app).await;
    let cases = [
        (object(&[]), "scalerMetadata.queue"),
        (object(&[("queue", "bad queue")]), "scalerMetadata.queue[0]"),
        (
            object(&[("queue", "q"), ("targetReadyPerReplica", "many")]),
            "scalerMetadata.targetReadyPerReplica",
        ),
    ];
    for (obj, field) in cases {
        let err = k.is_active(obj).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
        assert_eq!(bad_field(&err).as_deref(), Some(field), "{}", err.message());
    }
    let err = k
        .get_metrics(GetMetricsRequest {
            scaled_object_ref: Some(object(&[("queue", "q")])),
            metric_name: "cpu".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(bad_field(&err).as_deref(), Some("metricName"));
    app.shutdown().await;
}

/// A worker token bound to queues reads the backlogs of those queues only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_bound_worker_token_reads_only_its_queues() {
    let app = spawn_app_with(
        Backend::Sqlite,
        Options {
            auth: taskbroker_server::api::auth::parse_token_file(
                "worker w-bound-secret team-a queues=billing,reports-*\n",
            )
            .unwrap(),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let mut k = scaler(&app).await;
    let token = ("tokenFromEnv", "w-bound-secret");
    for q in ["billing", "reports-eu"] {
        let ok = k.is_active(object(&[("queue", q), token])).await;
        assert!(!ok.expect("its own queue").into_inner().result);
    }
    for q in ["billing-eu", "reports", "billing,other"] {
        let err = k
            .is_active(object(&[("queue", q), token]))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied, "{q}: {err:?}");
        assert!(
            err.message().starts_with("scalerMetadata.queue:"),
            "{err:?}"
        );
    }
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_on_the_scaler_takes_a_worker_or_scaler_token_from_the_metadata() {
    let token = |role, token: &str| TokenEntry {
        role,
        token: token.into(),
        name: None,
        workers: None,
        queues: None,
    };
    let app = spawn_app_with(
        Backend::Sqlite,
        Options {
            auth: vec![
                token(Role::Producer, "p-secret"),
                token(Role::Worker, "w-secret"),
                token(Role::Scaler, "s-secret"),
            ],
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let mut k = scaler(&app).await;
    let err = k.is_active(object(&[("queue", "q")])).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(err.message().contains("tokenFromEnv"), "{}", err.message());
    let err = k
        .is_active(object(&[("queue", "q"), ("tokenFromEnv", "p-secret")]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    for t in ["w-secret", "s-secret"] {
        let ok = k
            .is_active(object(&[("queue", "q"), ("tokenFromEnv", t)]))
            .await;
        assert!(!ok.expect("admitted").into_inner().result);
    }
    // A scaler token is good for nothing else.
    let mut c = app.broker().await;
    let mut req = tonic::Request::new(lease_req("q", 1));
    req.metadata_mut()
        .insert("authorization", "Bearer s-secret".parse().unwrap());
    assert_eq!(
        c.lease(req).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    app.shutdown().await;
}
