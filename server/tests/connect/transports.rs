//! Streams, gRPC-Web, CORS and the RPC metrics.

use super::*;

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
