//! Refusals: tokens as for gRPC, and hostile bodies that change nothing.

use super::*;

/// With tokens configured, a Connect call needs one as a gRPC call does: none
/// is 401 `unauthenticated` (also when the body would not parse), the wrong role
/// 403, a right one answers.
#[tokio::test]
async fn tokens_are_checked_as_for_grpc() {
    let tokens = format!("admin {ADMIN} ops\nproducer {PRODUCER} shop\n");
    let app = spawn_app_with(
        Backend::Sqlite,
        Options {
            auth: parse_token_file(&tokens).unwrap(),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let submit = json!({"tasks": [{"queue": "q"}]});
    let r = post(&app, "BrokerService/Submit", submit.clone(), None).await;
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (401, json!("unauthenticated"))
    );
    let r = http(
        app.addr,
        "/taskbroker.v1.BrokerService/Submit",
        "application/json",
        &[],
        b"{",
        false,
    )
    .await;
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (401, json!("unauthenticated"))
    );
    let r = post(
        &app,
        "BrokerService/Submit",
        submit.clone(),
        Some("wrong-token-000000"),
    )
    .await;
    assert_eq!(r.status, 401);
    let r = post(&app, "AdminService/ListWorkers", json!({}), Some(PRODUCER)).await;
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (403, json!("permission_denied"))
    );
    let r = post(&app, "BrokerService/Submit", submit, Some(PRODUCER)).await;
    assert_eq!(r.status, 200, "{}", r.json());
    let r = post(&app, "AdminService/ListTasks", json!({}), Some(ADMIN)).await;
    assert_eq!(r.json()["tasks"].as_array().map(Vec::len), Some(1));
    app.shutdown().await;
}

/// Malformed JSON, an unknown field, a body over the limit, a message over the
/// limit, garbage protobuf: each is a clear Connect error and submits nothing.
#[tokio::test]
async fn hostile_bodies_are_refused_and_change_nothing() {
    let app = spawn_app_with(
        Backend::Sqlite,
        Options {
            server: Some(taskbroker_server::app::ServerOptions {
                max_message_bytes: 64 << 10,
                ..Default::default()
            }),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let path = "/taskbroker.v1.BrokerService/Submit";
    let cases: Vec<(Vec<u8>, u16, &str, &str)> = vec![
        (
            b"{\"tasks\": [".to_vec(),
            400,
            "invalid_argument",
            "invalid JSON",
        ),
        (b"[1,2]".to_vec(), 400, "invalid_argument", "invalid JSON"),
        (
            br#"{"tasks": [{"queue": "q", "sneaky": 1}]}"#.to_vec(),
            400,
            "invalid_argument",
            "sneaky",
        ),
        (
            br#"{"tasks": [{"queue": "q"}]} {"tasks": []}"#.to_vec(),
            400,
            "invalid_argument",
            "invalid JSON",
        ),
        (
            format!(
                r#"{{"tasks": [{{"queue": "q", "key": "{}"}}]}}"#,
                "k".repeat(300 << 10)
            )
            .into_bytes(),
            429,
            "resource_exhausted",
            "larger than the broker accepts",
        ),
        (
            format!(
                r#"{{"tasks": [{{"queue": "q", "key": "{}"}}]}}"#,
                "k".repeat(100 << 10)
            )
            .into_bytes(),
            429,
            "resource_exhausted",
            "larger than the broker accepts",
        ),
    ];
    for (body, status, code, says) in cases {
        let r = http(app.addr, path, "application/json", &[], &body, false).await;
        let v = r.json();
        assert_eq!((r.status, v["code"].as_str()), (status, Some(code)), "{v}");
        assert!(v["message"].as_str().unwrap().contains(says), "{v}");
    }
    let r = http(
        app.addr,
        path,
        "application/proto",
        &[],
        &[0xff, 0xff, 0xff],
        false,
    )
    .await;
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (400, json!("invalid_argument"))
    );
    let listed = app
        .admin()
        .await
        .list_tasks(pb::ListTasksRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.tasks.is_empty(), "{listed:?}");
    app.shutdown().await;
}
