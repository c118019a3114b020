//! Auth: producer keys, the role and method matrix, and TLS client certificates.

use super::*;

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

all_backends!(a_key_of_another_producer_is_refused_without_its_id);
