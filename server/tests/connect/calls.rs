//! Connect calls: every method, JSON messages, codes and error details.

use super::*;

/// Every method of every served service answers an empty JSON request with a
/// Connect answer: 200 and its reply message, or a Connect error whose code and
/// HTTP status agree; server-streaming ones answer `application/connect+json`.
#[tokio::test]
async fn every_method_answers_a_connect_request() {
    let app = spawn_app(Backend::Sqlite).await.unwrap();
    let mut methods: Vec<_> = METHODS.iter().collect();
    methods.sort_by(|a, b| a.0.cmp(b.0));
    assert!(methods.len() > 20, "{} methods", methods.len());
    let mut answered = 0;
    for (path, m) in methods {
        if m.is_client_streaming() {
            continue;
        }
        if m.is_server_streaming() {
            let r = http(
                app.addr,
                path,
                "application/connect+json",
                &[],
                &envelope(0, b"{}"),
                true,
            )
            .await;
            assert_eq!(r.status, 200, "{path}");
            assert_eq!(
                r.header("content-type"),
                Some("application/connect+json"),
                "{path}"
            );
            answered += 1;
            continue;
        }
        let r = http(app.addr, path, "application/json", &[], b"{}", false).await;
        assert!(!matches!(r.status, 404 | 415), "{path}: {}", r.status);
        assert_eq!(r.header("content-type"), Some("application/json"), "{path}");
        let v = r.json();
        if r.status == 200 {
            DynamicMessage::deserialize(m.output(), &v)
                .unwrap_or_else(|e| panic!("{path}: reply is not its message: {e}"));
        } else {
            let code = v["code"].as_str().unwrap_or_else(|| panic!("{path}: {v}"));
            assert!(CODES.contains(&code), "{path}: {v}");
            assert!(v["message"].is_string(), "{path}: {v}");
            let want = match code {
                "invalid_argument" | "failed_precondition" | "out_of_range" => 400,
                "not_found" => 404,
                "already_exists" | "aborted" => 409,
                "permission_denied" => 403,
                "resource_exhausted" => 429,
                "unauthenticated" => 401,
                "unimplemented" => 501,
                "unavailable" => 503,
                "deadline_exceeded" => 504,
                _ => 500,
            };
            assert_eq!(r.status, want, "{path}: {v}");
        }
        answered += 1;
    }
    assert!(answered > 20);
    app.shutdown().await;
}

/// Submit, lease, complete and read a task with JSON alone; each JSON answer is
/// the message gRPC answers.
#[tokio::test]
async fn json_answers_are_the_grpc_messages() {
    let app = spawn_app(Backend::Sqlite).await.unwrap();
    let r = post(
        &app,
        "BrokerService/Submit",
        json!({"tasks": [{"queue": "mail", "payload": "aGVsbG8=", "priority": 3,
                          "metadata": {"k": "v"}}]}),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.json());
    let id = r.json()["results"][0]["taskId"]
        .as_str()
        .unwrap()
        .to_string();

    let grpc_task = get(&mut app.admin().await, &id).await;
    assert_eq!(grpc_task.payload, b"hello");
    let r = post(&app, "AdminService/GetTask", json!({"taskId": id}), None).await;
    assert_eq!(r.status, 200);
    let json_task: pb::GetTaskResponse = as_message("taskbroker.v1.GetTaskResponse", &r.json());
    assert_eq!(json_task.task.as_ref(), Some(&grpc_task));

    let r = post(
        &app,
        "AdminService/ListTasks",
        json!({"queue": "mail"}),
        None,
    )
    .await;
    let listed: pb::ListTasksResponse = as_message("taskbroker.v1.ListTasksResponse", &r.json());
    let grpc_listed = app
        .admin()
        .await
        .list_tasks(pb::ListTasksRequest {
            queue: "mail".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed, grpc_listed);

    let r = post(
        &app,
        "BrokerService/Lease",
        json!({"workerId": "w1", "queues": ["mail"], "maxTasks": 1}),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.json());
    let leased: pb::LeaseResponse = as_message("taskbroker.v1.LeaseResponse", &r.json());
    let t = &leased.tasks[0];
    assert_eq!(
        (t.task_id.as_str(), t.payload.as_slice()),
        (id.as_str(), &b"hello"[..])
    );
    let r = post(
        &app,
        "BrokerService/Complete",
        json!({"taskId": id, "leaseToken": t.lease_token, "result": "ZG9uZQ=="}),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.json());
    let done = get(&mut app.admin().await, &id).await;
    assert_eq!(state(&done), pb::TaskState::Succeeded);
    assert_eq!(done.result, b"done");

    // The binary codec answers the same message.
    let r = http(
        app.addr,
        "/taskbroker.v1.AdminService/GetTask",
        "application/proto",
        &[],
        &pb::GetTaskRequest {
            task_id: id.clone(),
        }
        .encode_to_vec(),
        false,
    )
    .await;
    assert_eq!(r.header("content-type"), Some("application/proto"));
    let proto = pb::GetTaskResponse::decode(r.body.as_slice()).unwrap();
    assert_eq!(proto.task, Some(done));
    app.shutdown().await;
}

/// A field the broker refuses is HTTP 400 `invalid_argument` naming it (in the
/// message and in a google.rpc.BadRequest detail); a stale lease token is 409
/// `aborted` with the ErrorInfo LEASE_LOST.
#[tokio::test]
async fn errors_carry_connect_codes_and_details() {
    let app = spawn_app(Backend::Sqlite).await.unwrap();
    let r = post(
        &app,
        "BrokerService/Lease",
        json!({"queues": ["q"], "maxTasks": 1}),
        None,
    )
    .await;
    assert_eq!(r.status, 400);
    let v = r.json();
    assert_eq!(v["code"], "invalid_argument");
    assert!(v["message"].as_str().unwrap().contains("worker_id"), "{v}");
    let d = &v["details"][0];
    assert_eq!(d["type"], "google.rpc.BadRequest", "{v}");
    assert_eq!(
        d["debug"]["fieldViolations"][0]["field"], "worker_id",
        "{v}"
    );
    assert!(d["value"].as_str().is_some_and(|s| !s.is_empty()), "{v}");

    let r = post(
        &app,
        "BrokerService/Lease",
        json!({"workerId": "w", "maxTasks": "many"}),
        None,
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(
        r.json()["message"].as_str().unwrap().contains("maxTasks"),
        "{}",
        r.json()
    );

    let id = submit_one(&mut app.broker().await, spec("q")).await;
    let leased = lease_one(&mut app.broker().await, "q").await;
    let r = post(
        &app,
        "BrokerService/Complete",
        json!({"taskId": id, "leaseToken": format!("{}0", leased.lease_token)}),
        None,
    )
    .await;
    assert_eq!(r.status, 409, "{}", r.json());
    let v = r.json();
    assert_eq!(v["code"], "aborted");
    let info = v["details"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["type"] == "google.rpc.ErrorInfo")
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(info["debug"]["reason"], "LEASE_LOST", "{v}");
    assert_eq!(
        state(&get(&mut app.admin().await, &id).await),
        pb::TaskState::Leased
    );

    let r = post(&app, "BrokerService/NoSuchMethod", json!({}), None).await;
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (404, json!("unimplemented"))
    );
    let r = http(
        app.addr,
        "/taskbroker.v1.AdminService/GetTask",
        "text/plain",
        &[],
        b"x",
        false,
    )
    .await;
    assert_eq!(r.status, 415);
    assert!(
        r.header("accept-post")
            .unwrap()
            .contains("application/json")
    );
    let r = http(
        app.addr,
        "/taskbroker.v1.AdminService/GetTask",
        "application/json",
        &[("connect-timeout-ms", "soon")],
        b"{}",
        false,
    )
    .await;
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (400, json!("invalid_argument"))
    );
    // Connect-Timeout-Ms is the call's deadline, as grpc-timeout is: a long-poll
    // does not wait its 30 s (the outer timeout only keeps a hang from blocking).
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        http(
            app.addr,
            "/taskbroker.v1.BrokerService/Lease",
            "application/json",
            &[("connect-timeout-ms", "500")],
            br#"{"workerId": "w", "queues": ["empty"], "maxTasks": 1, "wait": "30s"}"#,
            false,
        ),
    )
    .await
    .expect("the Lease answers within its Connect-Timeout-Ms");
    // The broker's long-poll ends empty at the deadline's commit margin, or the
    // deadline itself answers first: either way the caller's deadline holds.
    let v = r.json();
    assert!(
        (r.status, &v) == (200, &json!({}))
            || (r.status, &v["code"]) == (504, &json!("deadline_exceeded")),
        "{} {v}",
        r.status
    );
    app.shutdown().await;
}
