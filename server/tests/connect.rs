//! HTTP/JSON on the gRPC port (the Connect protocol): every method of every
//! service answers a Connect request (walked from the served descriptors, so a
//! new RPC is covered without a change here), JSON answers decode to the same
//! messages as the gRPC answers, errors carry Connect's codes, HTTP statuses and
//! details, and hostile bodies get a clear error and change nothing. The broker
//! is real and reached over loopback with plain HTTP/1.1.

mod common;

use std::time::Duration;

use common::*;
use prost::Message;
use prost_reflect::DynamicMessage;
use serde_json::{Value, json};
use taskbroker_client::pb;
use taskbroker_server::api::auth::parse_token_file;
use taskbroker_server::api::connect::codec::{METHODS, POOL};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ADMIN: &str = "admin-token-0000001";
const PRODUCER: &str = "producer-token-0001";

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }
}

/// Sends one HTTP/1.1 request and reads the reply head, and the body unless
/// `head_only`.
async fn http(
    addr: std::net::SocketAddr,
    path: &str,
    content_type: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    head_only: bool,
) -> Reply {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (n, v) in headers {
        req += &format!("{n}: {v}\r\n");
    }
    req += "\r\n";
    s.write_all(req.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "connection closed before the reply's head");
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8(raw[..head_end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut rest = raw[head_end + 4..].to_vec();
    if head_only {
        return Reply {
            status,
            headers,
            body: rest,
        };
    }
    s.read_to_end(&mut rest).await.unwrap();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked { dechunk(&rest) } else { rest };
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = raw.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(std::str::from_utf8(&raw[..i]).unwrap().trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&raw[i + 2..i + 2 + size]);
        raw = &raw[i + 2 + size + 2..];
    }
    out
}

async fn post(app: &TestApp, method: &str, body: Value, token: Option<&str>) -> Reply {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("connect-protocol-version", "1")];
    if let Some(a) = &auth {
        headers.push(("authorization", a.as_str()));
    }
    http(
        app.addr,
        &format!("/taskbroker.v1.{method}"),
        "application/json",
        &headers,
        body.to_string().as_bytes(),
        false,
    )
    .await
}

/// A JSON reply decoded as the named message and re-encoded, to compare with
/// the gRPC answer.
fn as_message<M: Message + Default>(name: &str, v: &Value) -> M {
    let desc = POOL.get_message_by_name(name).expect("known message");
    let dm = DynamicMessage::deserialize(desc, v).expect("the reply decodes as its message");
    M::decode(dm.encode_to_vec().as_slice()).unwrap()
}

const CODES: &[&str] = &[
    "canceled",
    "unknown",
    "invalid_argument",
    "deadline_exceeded",
    "not_found",
    "already_exists",
    "permission_denied",
    "resource_exhausted",
    "failed_precondition",
    "aborted",
    "out_of_range",
    "unimplemented",
    "internal",
    "unavailable",
    "data_loss",
    "unauthenticated",
];

fn envelope(flags: u8, msg: &[u8]) -> Vec<u8> {
    let mut v = vec![flags];
    v.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    v.extend_from_slice(msg);
    v
}

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

/// WatchTasks as Connect server streaming: enveloped JSON messages, each a
/// WatchTasksResponse, as events happen.
#[tokio::test]
async fn watch_tasks_streams_enveloped_json() {
    let app = spawn_app(Backend::Sqlite).await.unwrap();
    let mut s = TcpStream::connect(app.addr).await.unwrap();
    let body = envelope(0, json!({"queues": ["watched"]}).to_string().as_bytes());
    let head = format!(
        "POST /taskbroker.v1.AdminService/WatchTasks HTTP/1.1\r\nhost: x\r\ncontent-type: application/connect+json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&body).await.unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    // The reply's head marks the point from which events stream.
    while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the head");
        raw.extend_from_slice(&buf[..n]);
    }
    let id = submit_one(&mut app.broker().await, spec("watched")).await;
    // Reads until the event of the submitted task has come.
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "stream closed: {:?}", String::from_utf8_lossy(&raw));
            raw.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&raw);
            if text.contains(&id) {
                return text.into_owned();
            }
        }
    })
    .await
    .expect("the submitted task's event streams");
    assert!(found.starts_with("HTTP/1.1 200"), "{found}");
    assert!(found.contains("application/connect+json"), "{found}");
    let start = found.find("{\"events\"").expect("an events message");
    let msg: Value = serde_json::Deserializer::from_str(&found[start..])
        .into_iter()
        .next()
        .unwrap()
        .unwrap();
    let r: pb::WatchTasksResponse = as_message("taskbroker.v1.WatchTasksResponse", &msg);
    assert!(r.events.iter().any(|e| e.task_id == id), "{msg}");
    app.shutdown().await;
}

/// Reads a whole reply to a raw request (sent with `connection: close`).
async fn raw(addr: std::net::SocketAddr, request: &[u8]) -> Reply {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).await.unwrap();
    let end = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let head = String::from_utf8(all[..end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = all[end + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    Reply {
        status,
        body: if chunked { dechunk(&rest) } else { rest },
        headers,
    }
}

/// gRPC-Web over HTTP/1.1: the reply message, then the status in a trailer frame.
#[tokio::test]
async fn grpc_web_calls_answer() {
    let app = spawn_app(Backend::Sqlite).await.unwrap();
    let id = submit_one(&mut app.broker().await, spec("web")).await;
    let r = http(
        app.addr,
        "/taskbroker.v1.AdminService/GetTask",
        "application/grpc-web+proto",
        &[("x-grpc-web", "1")],
        &envelope(
            0,
            &pb::GetTaskRequest {
                task_id: id.clone(),
            }
            .encode_to_vec(),
        ),
        false,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/grpc-web+proto"));
    let len = u32::from_be_bytes(r.body[1..5].try_into().unwrap()) as usize;
    assert_eq!(r.body[0], 0);
    let reply = pb::GetTaskResponse::decode(&r.body[5..5 + len]).unwrap();
    assert_eq!(reply.task.unwrap().id, id);
    let trailer = &r.body[5 + len..];
    assert_eq!(trailer[0], 0x80);
    assert!(
        String::from_utf8_lossy(&trailer[5..]).contains("grpc-status:0"),
        "{trailer:?}"
    );
    app.shutdown().await;
}

/// CORS answers only the configured origin, by name, never `*`; a preflight
/// from another origin is refused and a call from one gets no CORS headers.
#[tokio::test]
async fn cors_allows_only_the_configured_origin() {
    let app = spawn_app_with(
        Backend::Sqlite,
        Options {
            server: Some(taskbroker_server::app::ServerOptions {
                cors_allowed_origins: vec!["http://console.test:9090".into()],
                ..Default::default()
            }),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let preflight = |origin: &str| {
        format!(
            "OPTIONS /taskbroker.v1.BrokerService/Submit HTTP/1.1\r\nhost: x\r\norigin: {origin}\r\naccess-control-request-method: POST\r\naccess-control-request-headers: content-type, authorization\r\nconnection: close\r\n\r\n"
        )
    };
    let r = raw(app.addr, preflight("http://console.test:9090").as_bytes()).await;
    assert_eq!(r.status, 204);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://console.test:9090")
    );
    assert!(
        r.header("access-control-allow-headers")
            .unwrap()
            .contains("authorization")
    );
    assert_eq!(r.header("access-control-allow-credentials"), None);
    let r = raw(app.addr, preflight("http://evil.test").as_bytes()).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.header("access-control-allow-origin"), None);

    for (origin, allowed) in [
        ("http://console.test:9090", true),
        ("http://evil.test", false),
    ] {
        let r = http(
            app.addr,
            "/taskbroker.v1.AdminService/ListTasks",
            "application/json",
            &[("origin", origin)],
            b"{}",
            false,
        )
        .await;
        assert_eq!(r.status, 200);
        let want = allowed.then_some(origin);
        assert_eq!(r.header("access-control-allow-origin"), want);
    }
    app.shutdown().await;
}

/// A Connect call is counted as its gRPC method, by code: one that ran, and one
/// refused before it ran (a body that is not JSON).
#[tokio::test]
async fn connect_calls_count_in_the_rpc_metrics() {
    let app = spawn_app_with(
        Backend::Sqlite,
        Options {
            metrics: true,
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let path = "/taskbroker.v1.BrokerService/Submit";
    let ok = br#"{"tasks": [{"queue": "counted"}]}"#;
    assert_eq!(
        http(app.addr, path, "application/json", &[], ok, false)
            .await
            .status,
        200
    );
    assert_eq!(
        http(app.addr, path, "application/json", &[], b"{", false)
            .await
            .status,
        400
    );
    let scrape = raw(
        app.metrics_addr.unwrap(),
        b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    let text = String::from_utf8_lossy(&scrape.body);
    for code in ["OK", "INVALID_ARGUMENT"] {
        let line = text
            .lines()
            .find(|l| {
                l.starts_with("taskbroker_rpc_duration_seconds_count")
                    && l.contains(&format!("method=\"{path}\""))
                    && l.contains(&format!("code=\"{code}\""))
            })
            .unwrap_or_else(|| panic!("no {code} count for Submit:\n{text}"));
        assert!(line.ends_with(" 1"), "{line}");
    }
    app.shutdown().await;
}
