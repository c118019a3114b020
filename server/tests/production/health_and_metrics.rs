//! Readiness, reflection, the metrics, and load shedding.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_serves_and_flips_on_drain_and_reflection_lists_services() {
    let app = spawn_app(Backend::Sqlite).await.unwrap();
    let mut h = HealthClient::new(channel(&app.url()).await);
    let live = h
        .check(HealthCheckRequest { service: "".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(live.status, ServingStatus::Serving as i32);
    let mut ready = readiness(&app.url()).await;
    until(&mut ready, ServingStatus::Serving).await;

    // Reflection v1 lists our services.
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let mut r = ServerReflectionClient::new(channel(&app.url()).await);
    let req = tonic_reflection::pb::v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut resp = r
        .server_reflection_info(futures::stream::iter(vec![req]))
        .await
        .unwrap()
        .into_inner();
    let Some(MessageResponse::ListServicesResponse(list)) =
        resp.message().await.unwrap().unwrap().message_response
    else {
        panic!("expected a service list")
    };
    let names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"taskbroker.v1.BrokerService".to_string()),
        "{names:?}"
    );
    assert!(names.contains(&"taskbroker.v1.AdminService".to_string()));

    // Draining: a waiting long-poll answers empty at once, readiness goes NOT_SERVING.
    let mut c = app.broker().await;
    let poll = tokio::spawn(async move {
        let mut req = lease_req("drain", 1);
        req.wait = secs(60);
        c.lease(req).await
    });
    app.until_waiting(1).await;
    let stopping = tokio::spawn(app.shutdown());
    until(&mut ready, ServingStatus::NotServing).await;
    let answered = poll
        .await
        .unwrap()
        .expect("the long-poll is answered, not failed");
    assert!(answered.into_inner().tasks.is_empty());
    stopping.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_as_tasks_flow() {
    let app = spawn_app_with(
        Backend::Sqlite,
        Options {
            metrics: true,
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let mut c = app.broker().await;
    submit(&mut c, vec![spec("m"), spec("m"), spec("m")]).await;
    let leased = lease(&mut c, "m", 2).await;
    c.complete(pb::CompleteRequest {
        task_id: leased[0].task_id.clone(),
        lease_token: leased[0].lease_token.clone(),
        result: vec![],
        lease_next: None,
    })
    .await
    .unwrap();
    c.fail(pb::FailRequest {
        task_id: leased[1].task_id.clone(),
        lease_token: leased[1].lease_token.clone(),
        non_retryable: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let _ = c
        .complete(pb::CompleteRequest {
            task_id: leased[1].task_id.clone(),
            lease_token: "stale".into(),
            result: vec![],
            lease_next: None,
        })
        .await;
    let text = scrape(app.metrics_addr.unwrap()).await;
    for line in [
        "taskbroker_tasks_submitted_total{queue=\"m\"} 3",
        "taskbroker_tasks_leased_total{queue=\"m\",path=\"plain\"} 2",
        "taskbroker_tasks_completed_total{queue=\"m\"} 1",
        "taskbroker_tasks_failed_total{queue=\"m\"} 1",
        "taskbroker_tasks_dead_total{queue=\"m\"} 1",
        "taskbroker_queue_depth{queue=\"m\",state=\"ready\"} 1",
        "taskbroker_queue_depth{queue=\"m\",state=\"succeeded\"} 1",
        "taskbroker_task_run_seconds_count{queue=\"m\"} 2",
        "taskbroker_task_wait_seconds_count{queue=\"m\"} 2",
        "taskbroker_rpc_duration_seconds_count{method=\"/taskbroker.v1.BrokerService/Submit\",code=\"OK\"} 1",
        "taskbroker_rpc_duration_seconds_count{method=\"/taskbroker.v1.BrokerService/Complete\",code=\"ABORTED\"} 1",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert!(text.contains("taskbroker_db_pool_connections "));
    assert!(!text.contains(&leased[0].task_id), "no task ids in labels");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_methods_do_not_grow_the_metrics() {
    let app = spawn_app_with(
        Backend::Sqlite,
        Options {
            metrics: true,
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel(&app.url()).await);
    for i in 0..50 {
        grpc.ready().await.unwrap();
        let path: http::uri::PathAndQuery = format!("/taskbroker.v1.BrokerService/MadeUp{i}")
            .parse()
            .unwrap();
        let codec = tonic_prost::ProstCodec::<(), ()>::default();
        let r = grpc.unary(tonic::Request::new(()), path, codec).await;
        assert_eq!(code(r), Code::Unimplemented);
    }
    let text = scrape(app.metrics_addr.unwrap()).await;
    assert!(
        !text.contains("MadeUp"),
        "made-up paths became labels:\n{text}"
    );
    let unknown: Vec<_> = text
        .lines()
        .filter(|l| l.starts_with("taskbroker_rpc_duration_seconds_count{method=\"unknown\""))
        .collect();
    assert_eq!(
        unknown,
        ["taskbroker_rpc_duration_seconds_count{method=\"unknown\",code=\"UNIMPLEMENTED\"} 50"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_limit_calls_are_shed_and_oversized_messages_refused() {
    let app = spawn_app_with(
        Backend::Sqlite,
        Options {
            server: Some(ServerOptions {
                max_concurrent_requests: 1,
                max_message_bytes: 4096,
                ..ServerOptions::default()
            }),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let mut c = app.broker().await;
    let big = c
        .submit(pb::SubmitRequest {
            tasks: vec![pb::TaskSpec {
                payload: vec![7; 8192],
                ..spec("big")
            }],
        })
        .await
        .unwrap_err();
    assert_eq!(big.code(), Code::ResourceExhausted, "{}", big.message());

    // One long-poll holds the only slot; the next call is shed at once.
    let mut waiter = app.broker().await;
    let poll = tokio::spawn(async move {
        let mut req = lease_req("shed", 1);
        req.wait = secs(60);
        waiter.lease(req).await
    });
    app.until_waiting(1).await;
    let shed = c
        .submit(pb::SubmitRequest {
            tasks: vec![spec("other")],
        })
        .await
        .unwrap_err();
    assert_eq!(shed.code(), Code::ResourceExhausted);
    // Health checks are never shed.
    let mut h = HealthClient::new(channel(&app.url()).await);
    h.check(HealthCheckRequest { service: "".into() })
        .await
        .unwrap();
    app.shutdown().await;
    assert!(poll.await.unwrap().unwrap().into_inner().tasks.is_empty());
}

/// A generic client (grpcurl) decodes error details by asking reflection for
/// the file that defines them: google/rpc/error_details.proto is served, by
/// name and by each detail type the broker sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_serves_the_error_detail_types() {
    use prost::Message as _;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let app = spawn_app(Backend::Sqlite).await.unwrap();
    let mut r = ServerReflectionClient::new(channel(&app.url()).await);
    let asks = vec![
        MessageRequest::FileByFilename("google/rpc/error_details.proto".into()),
        MessageRequest::FileContainingSymbol("google.rpc.BadRequest".into()),
        MessageRequest::FileContainingSymbol("google.rpc.RetryInfo".into()),
        MessageRequest::FileContainingSymbol("google.rpc.ErrorInfo".into()),
        MessageRequest::FileContainingSymbol("google.rpc.QuotaFailure".into()),
    ];
    let n = asks.len();
    let reqs: Vec<_> = asks
        .into_iter()
        .map(|m| tonic_reflection::pb::v1::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(m),
        })
        .collect();
    let mut resp = r
        .server_reflection_info(futures::stream::iter(reqs))
        .await
        .unwrap()
        .into_inner();
    for i in 0..n {
        let answer = resp.message().await.unwrap().unwrap().message_response;
        let Some(MessageResponse::FileDescriptorResponse(files)) = answer else {
            panic!("request {i}: expected a file, got {answer:?}")
        };
        let file = files
            .file_descriptor_proto
            .iter()
            .map(|b| prost_types::FileDescriptorProto::decode(b.as_slice()).unwrap())
            .find(|f| f.name() == "google/rpc/error_details.proto")
            .unwrap_or_else(|| panic!("request {i}: error_details.proto not among the files"));
        let names: Vec<&str> = file.message_type.iter().map(|m| m.name()).collect();
        for want in ["BadRequest", "RetryInfo", "ErrorInfo", "QuotaFailure"] {
            assert!(names.contains(&want), "{names:?}");
        }
    }
    app.shutdown().await;
}
