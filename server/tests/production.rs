//! The broker as a service: health, reflection, metrics, load shedding, message
//! limits, authentication, TLS, configuration errors and SIGTERM.

mod common;

use common::*;
use taskbroker_client::pb;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use taskbroker_server::api::auth::{Role, TokenEntry};
use taskbroker_server::app::{ServerOptions, TlsOptions};
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

async fn channel(url: &str) -> Channel {
    Channel::from_shared(url.to_string())
        .unwrap()
        .connect()
        .await
        .unwrap()
}

fn code<T>(r: Result<T, tonic::Status>) -> Code {
    r.err().map_or(Code::Ok, |s| s.code())
}

async fn readiness(addr: &str) -> tonic::Streaming<tonic_health::pb::HealthCheckResponse> {
    let mut h = HealthClient::new(channel(addr).await);
    h.watch(HealthCheckRequest {
        service: "readiness".into(),
    })
    .await
    .unwrap()
    .into_inner()
}

/// Reads the watch stream until it reports `want`.
async fn until(
    stream: &mut tonic::Streaming<tonic_health::pb::HealthCheckResponse>,
    want: ServingStatus,
) {
    let reached = async {
        while let Some(r) = stream.message().await.unwrap() {
            if r.status == want as i32 {
                return;
            }
        }
        panic!("health stream ended before {want:?}");
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), reached)
        .await
        .unwrap_or_else(|_| panic!("health never reported {want:?}"));
}

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

async fn scrape(addr: std::net::SocketAddr) -> String {
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

fn token(role: Role, token: &str, name: &str) -> TokenEntry {
    TokenEntry {
        role,
        token: token.into(),
        name: Some(name.into()),
        workers: None,
        queues: None,
    }
}

fn authed<T>(msg: T, tok: Option<&str>) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    if let Some(t) = tok {
        r.metadata_mut()
            .insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    r
}

/// A producer's key never reveals another producer's task: ALREADY_EXISTS without
/// the id, nothing stored; the owner and an admin still get the id. Both backends.
async fn a_key_of_another_producer_is_refused_without_its_id(b: Backend) {
    const P: &str = "producer-token-0001";
    const P2: &str = "producer-token-0002";
    const A: &str = "admin-token-0000001";
    let Some(app) = spawn_app_with(
        b,
        Options {
            auth: vec![
                token(Role::Producer, P, "shop"),
                token(Role::Producer, P2, "billing"),
                token(Role::Admin, A, "ops"),
            ],
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let mut c = app.broker().await;
    let keyed = |key: &str| pb::TaskSpec {
        key: key.into(),
        ..spec("orders")
    };
    let send = |tasks: Vec<pb::TaskSpec>, tok: &'static str| {
        let mut c = c.clone();
        async move {
            c.submit(authed(pb::SubmitRequest { tasks }, Some(tok)))
                .await
        }
    };
    let first = send(vec![keyed("order-1")], P).await.unwrap().into_inner();
    let id = first.results[0].task_id.clone();
    let refused = send(vec![keyed("order-2"), keyed("order-1")], P2)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::AlreadyExists, "{refused:?}");
    assert!(refused.message().contains("tasks[1].key"), "{refused:?}");
    assert!(
        !refused.message().contains(&id),
        "the id leaked: {refused:?}"
    );
    // All or nothing: order-2 was not stored either.
    let again = send(vec![keyed("order-2")], P2).await.unwrap().into_inner();
    assert!(!again.results[0].deduplicated);
    // The owner and an admin see the task's id.
    let own = send(vec![keyed("order-1")], P).await.unwrap().into_inner();
    assert_eq!(
        (own.results[0].task_id.as_str(), own.results[0].deduplicated),
        (id.as_str(), true)
    );
    let by_admin = send(vec![keyed("order-1")], A).await.unwrap().into_inner();
    assert_eq!(by_admin.results[0].task_id, id);
    c.submit(authed(
        pb::SubmitRequest {
            tasks: vec![spec("x")],
        },
        Some(P),
    ))
    .await
    .unwrap();
}

all_backends!(a_key_of_another_producer_is_refused_without_its_id);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_matrix_of_roles_and_methods() {
    const P: &str = "producer-token-0001";
    const P2: &str = "producer-token-0002";
    const W: &str = "worker-token-000001";
    const A: &str = "admin-token-0000001";
    let app = spawn_app_with(
        Backend::Sqlite,
        Options {
            auth: vec![
                token(Role::Producer, P, "shop"),
                token(Role::Producer, P2, "billing"),
                token(Role::Worker, W, "fleet"),
                token(Role::Admin, A, "ops"),
            ],
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let mut c = app.broker().await;
    let mut admin = app.admin().await;

    // No token, bad token.
    assert_eq!(
        code(
            c.submit(authed(
                pb::SubmitRequest {
                    tasks: vec![spec("a")]
                },
                None
            ))
            .await
        ),
        Code::Unauthenticated
    );
    assert_eq!(
        code(
            c.submit(authed(
                pb::SubmitRequest {
                    tasks: vec![spec("a")]
                },
                Some("nope-nope-nope-nope")
            ))
            .await
        ),
        Code::Unauthenticated
    );

    // Submit: producer and admin.
    for (tok, want) in [(P, Code::Ok), (W, Code::PermissionDenied), (A, Code::Ok)] {
        let r = c
            .submit(authed(
                pb::SubmitRequest {
                    tasks: vec![spec("a")],
                },
                Some(tok),
            ))
            .await;
        assert_eq!(code(r), want, "submit with {tok}");
    }
    // Lease, Heartbeat, Checkpoint, Complete, Fail: worker and admin.
    for (tok, want) in [(P, Code::PermissionDenied), (W, Code::Ok), (A, Code::Ok)] {
        assert_eq!(
            code(c.lease(authed(lease_req("none", 1), Some(tok))).await),
            want,
            "lease {tok}"
        );
        let hb = pb::HeartbeatRequest {
            worker_id: "w".into(),
            leases: vec![],
            extend_by: None,
        };
        assert_eq!(
            code(c.heartbeat(authed(hb, Some(tok))).await),
            want,
            "heartbeat {tok}"
        );
        let unknown = |_: ()| pb::CompleteRequest {
            task_id: "x".into(),
            lease_token: "y".into(),
            result: vec![],
            lease_next: None,
        };
        let got = code(c.complete(authed(unknown(()), Some(tok))).await);
        let want_complete = if want == Code::Ok {
            Code::NotFound
        } else {
            want
        };
        assert_eq!(got, want_complete, "complete {tok}");
        let cp = pb::CheckpointRequest {
            task_id: "x".into(),
            lease_token: "y".into(),
            checkpoint: vec![],
            extend_by: None,
        };
        assert_eq!(
            code(c.checkpoint(authed(cp, Some(tok))).await),
            want_complete,
            "checkpoint {tok}"
        );
        let f = pb::FailRequest {
            task_id: "x".into(),
            lease_token: "y".into(),
            ..Default::default()
        };
        assert_eq!(
            code(c.fail(authed(f, Some(tok))).await),
            want_complete,
            "fail {tok}"
        );
    }
    // Admin calls: admin only (GetTask/ListAttempts also for the producer's own tasks).
    for (tok, want) in [
        (P, Code::PermissionDenied),
        (W, Code::PermissionDenied),
        (A, Code::Ok),
    ] {
        assert_eq!(
            code(
                admin
                    .list_tasks(authed(pb::ListTasksRequest::default(), Some(tok)))
                    .await
            ),
            want
        );
        assert_eq!(
            code(
                admin
                    .get_queue_stats(authed(pb::GetQueueStatsRequest::default(), Some(tok)))
                    .await
            ),
            want
        );
        let cancel = pb::CancelTaskRequest {
            task_id: "x".into(),
        };
        let want_cancel = if want == Code::Ok {
            Code::NotFound
        } else {
            want
        };
        assert_eq!(
            code(admin.cancel_task(authed(cancel, Some(tok))).await),
            want_cancel
        );
        let rq = pb::RequeueTaskRequest {
            task_id: "x".into(),
        };
        assert_eq!(
            code(admin.requeue_task(authed(rq, Some(tok))).await),
            want_cancel
        );
        let up = pb::UpdateTaskRequest {
            task_id: "x".into(),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["priority".into()],
            }),
            ..Default::default()
        };
        assert_eq!(
            code(admin.update_task(authed(up, Some(tok))).await),
            want_cancel
        );
    }
    // A producer reads its own tasks, not another producer's.
    let mine = c
        .submit(authed(
            pb::SubmitRequest {
                tasks: vec![spec("own")],
            },
            Some(P),
        ))
        .await
        .unwrap()
        .into_inner()
        .results[0]
        .task_id
        .clone();
    let get = |tok| {
        authed(
            pb::GetTaskRequest {
                task_id: mine.clone(),
            },
            Some(tok),
        )
    };
    assert_eq!(code(admin.get_task(get(P)).await), Code::Ok);
    assert_eq!(code(admin.get_task(get(P2)).await), Code::NotFound);
    assert_eq!(code(admin.get_task(get(W)).await), Code::PermissionDenied);
    assert_eq!(code(admin.get_task(get(A)).await), Code::Ok);
    let att = |tok| {
        authed(
            pb::ListAttemptsRequest {
                task_id: mine.clone(),
            },
            Some(tok),
        )
    };
    assert_eq!(code(admin.list_attempts(att(P)).await), Code::Ok);
    assert_eq!(code(admin.list_attempts(att(P2)).await), Code::NotFound);
    // Health needs no token.
    let mut h = HealthClient::new(channel(&app.url()).await);
    h.check(HealthCheckRequest { service: "".into() })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_client_certificates_round_trips() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let leaf = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf("localhost");
    let (client_cert, client_key) = leaf("worker-1");

    let app = spawn_app_with(
        Backend::Sqlite,
        Options {
            tls: Some(TlsOptions {
                cert_pem: server_cert.into_bytes(),
                key_pem: server_key.into_bytes(),
                client_ca_pem: Some(ca.pem().into_bytes()),
            }),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let url = format!("https://localhost:{}", app.addr.port());
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca.pem()))
        .domain_name("localhost");
    let channel = Channel::from_shared(url.clone())
        .unwrap()
        .tls_config(
            tls.clone()
                .identity(Identity::from_pem(client_cert, client_key)),
        )
        .unwrap()
        .connect()
        .await
        .expect("mutual TLS handshake");
    let mut c = BrokerServiceClient::new(channel);
    let id = submit_one(&mut c, spec("tls")).await;
    assert_eq!(lease_one(&mut c, "tls").await.task_id, id);

    // Without a client certificate the handshake (or the first call) fails.
    let anonymous = async {
        let ch = Channel::from_shared(url)
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await?;
        BrokerServiceClient::new(ch)
            .submit(pb::SubmitRequest {
                tasks: vec![spec("tls")],
            })
            .await
            .map_err(|e| -> Box<dyn std::error::Error> { e.into() })?;
        Ok::<_, Box<dyn std::error::Error>>(())
    };
    assert!(
        anonymous.await.is_err(),
        "a client without a certificate is refused"
    );
}

fn broker_bin() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_taskbroker"))
}

#[test]
fn invalid_configuration_exits_with_one_line_before_binding() {
    let out = broker_bin()
        .args(["serve", "--listen", "127.0.0.1:0", "--retry-jitter", "3"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<_> = err
        .lines()
        .filter(|l| l.starts_with("taskbroker:"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("jitter"), "{err}");
    assert!(out.stdout.is_empty(), "nothing was served");

    let out = broker_bin()
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--insecure"));

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tb.toml");
    std::fs::write(
        &cfg,
        "database_url = \"postgres://tb:hunter2@db/tb\"\n[[auth.tokens]]\nrole = \"admin\"\ntoken = \"very-secret-admin-token\"\n",
    )
    .unwrap();
    let out = broker_bin()
        .args([
            "config",
            "print",
            "--config",
            cfg.to_str().unwrap(),
            "--reclaim-interval",
            "2s",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("reclaim_interval = \"2s\""), "{printed}");
    assert!(printed.contains("postgres://tb:***@db/tb"));
    assert!(
        !printed.contains("hunter2") && !printed.contains("very-secret"),
        "{printed}"
    );
}

/// SIGTERM: waiting long-polls answer empty at once and are granted nothing while
/// the broker drains (their tasks come due during the grace period), a Complete
/// sent as the signal lands is either acknowledged and kept or refused, held
/// leases survive the stop, and the broker exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_long_polls_and_exits_cleanly() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/tb.db", dir.path().display());
    let start = |url: String, log: std::path::PathBuf| async move {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_taskbroker"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "127.0.0.1:0",
            ])
            .args(["--database-url", &url, "--shutdown-grace", "30s"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut addr, mut metrics) = (String::new(), String::new());
        while let Some(l) = lines.next_line().await.unwrap() {
            if let Some(a) = l.strip_prefix("taskbroker listening on ") {
                addr = format!("http://{a}");
            }
            if let Some(m) = l.trim().strip_prefix("metrics:  http://") {
                metrics = m.trim_end_matches("/metrics").to_string();
                break;
            }
        }
        // Keep reading: a print into a closed pipe would kill the broker.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        (child, addr, metrics)
    };
    let log = dir.path().join("broker.log");
    let (mut child, addr, metrics) = start(url.clone(), log.clone()).await;
    let mut c = BrokerServiceClient::connect(addr.clone()).await.unwrap();
    let held = submit_one(&mut c, spec("held")).await;
    let lease = lease_one(&mut c, "held").await;
    // Due in 8 s: within the grace period, so a broker that kept serving the
    // long-polls would lease them before it exits.
    let due = chrono::Utc::now() + chrono::Duration::seconds(8);
    let ids = submit(
        &mut c,
        vec![
            pb::TaskSpec {
                run_at: ts(due),
                ..spec("due")
            };
            2
        ],
    )
    .await;
    let mut polls = Vec::new();
    for _ in 0..3 {
        let addr = addr.clone();
        polls.push(tokio::spawn(async move {
            let mut c = BrokerServiceClient::connect(addr).await.unwrap();
            let mut req = lease_req("due", 1);
            req.wait = secs(60);
            c.lease(req).await
        }));
    }
    // Wait (bounded) until the broker reports the three long-polls waiting.
    let metrics_addr: std::net::SocketAddr = metrics.parse().unwrap();
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !scrape(metrics_addr)
        .await
        .contains("taskbroker_lease_waiters 3")
    {
        assert!(
            std::time::Instant::now() < give_up,
            "the polls never waited"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let complete = tokio::spawn({
        let (mut c, lease) = (c.clone(), lease.clone());
        async move {
            c.complete(pb::CompleteRequest {
                task_id: lease.task_id,
                lease_token: lease.lease_token,
                result: b"done".to_vec(),
                lease_next: None,
            })
            .await
        }
    });
    let pid = child.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let logged = || std::fs::read_to_string(&log).unwrap_or_default();
    for p in polls {
        let r = tokio::time::timeout(std::time::Duration::from_secs(30), p)
            .await
            .expect("long-poll answered at once")
            .unwrap();
        let r =
            r.unwrap_or_else(|e| panic!("long-poll answered OK, got {e:?}; log:\n{}", logged()));
        assert!(r.into_inner().tasks.is_empty());
    }
    let completed = complete.await.unwrap();
    let status = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait())
        .await
        .expect("exits within the grace period")
        .unwrap();
    assert!(
        status.success(),
        "clean exit, got {status:?}; log:\n{}",
        logged()
    );

    // A new broker on the same file: nothing was leased during the drain, the
    // held lease is as it was, or completed if the broker acknowledged it.
    let (_child, addr, _) = start(url, dir.path().join("broker2.log")).await;
    let mut admin = taskbroker_client::pb::admin_service_client::AdminServiceClient::connect(addr)
        .await
        .unwrap();
    for id in &ids {
        let t = get(&mut admin, id).await;
        assert_eq!(t.attempt, 0, "leased while draining: {t:?}");
    }
    let h = get(&mut admin, &held).await;
    match completed {
        Ok(_) => assert_eq!(
            state(&h),
            pb::TaskState::Succeeded,
            "an acknowledged Complete was lost"
        ),
        // Refused (or its answer lost with the connection): either state is
        // fine, as nothing was acknowledged.
        Err(_) => assert!(matches!(
            state(&h),
            pb::TaskState::Leased | pb::TaskState::Succeeded
        )),
    }
}

/// Readiness follows the database: NOT_SERVING while Postgres is away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_flips_while_the_database_is_unreachable() {
    let Some(db) = test_db(Backend::Postgres).await else {
        return;
    };
    let db = std::sync::Arc::new(db);
    let app = spawn_on(db.clone(), Options::default()).await;
    let mut ready = readiness(&app.url()).await;
    until(&mut ready, ServingStatus::Serving).await;
    // Take the database away: stop accepting connections to it by terminating its
    // backends and blocking new ones for this database.
    let admin_url = postgres_admin_url().unwrap();
    let name = db.url.rsplit('/').next().unwrap().to_string();
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin_url)
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE {name} ALLOW_CONNECTIONS false"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
        .bind(&name)
        .execute(&mut conn)
        .await
        .unwrap();
    until(&mut ready, ServingStatus::NotServing).await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE {name} ALLOW_CONNECTIONS true"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    until(&mut ready, ServingStatus::Serving).await;
    let mut c = app.broker().await;
    submit_one(&mut c, spec("back")).await;
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
