//! Payload schemas in the web console, over real HTTP on the side port: the
//! queue page shows and edits the schema (a bad one refused in one line; a
//! post that leaves the field out keeps it, and only the box removes it), and
//! the schedule form shows one input per property of the queue's schema and
//! builds the payload from them.

mod common;

use std::net::SocketAddr;

use common::*;
use taskbroker_client::pb;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Resp {
    status: u16,
    location: Option<String>,
    body: String,
}

impl Resp {
    fn csrf(&self) -> String {
        let at = self
            .body
            .find("name=\"csrf\" value=\"")
            .expect("a csrf field");
        let rest = &self.body[at + 19..];
        rest[..rest.find('"').unwrap()].to_string()
    }
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The console's address and the cookies it set (the CSRF check needs them).
struct Browser {
    addr: SocketAddr,
    cookies: Vec<String>,
}

async fn request(b: &mut Browser, method: &str, path: &str, form: &[(&str, &str)]) -> Resp {
    let addr = b.addr;
    let body: Vec<String> = form
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect();
    let body = body.join("&");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if !b.cookies.is_empty() {
        req.push_str(&format!("Cookie: {}\r\n", b.cookies.join("; ")));
    }
    if method == "POST" {
        req.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(&body);
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8(raw).expect("UTF-8 response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a full response");
    let mut lines = head.lines();
    let status = lines.next().unwrap()[9..12].parse().unwrap();
    let headers: Vec<(&str, &str)> = lines.filter_map(|l| l.split_once(": ")).collect();
    for (_, v) in headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))
    {
        let pair = v.split(';').next().unwrap().to_string();
        let name = pair.split('=').next().unwrap().to_string();
        b.cookies.retain(|c| !c.starts_with(&format!("{name}=")));
        b.cookies.push(pair);
    }
    let location = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("location"))
        .map(|(_, v)| v.to_string());
    Resp {
        status,
        location,
        body: body.to_string(),
    }
}

async fn console_on(backend: Backend) -> Option<TestApp> {
    spawn_app_with(
        backend,
        Options {
            metrics: true,
            ..Options::default()
        },
    )
    .await
}

async fn schema_of(app: &TestApp, queue: &str) -> String {
    app.admin()
        .await
        .get_queue(pb::GetQueueRequest { name: queue.into() })
        .await
        .expect("get queue")
        .into_inner()
        .queue
        .and_then(|q| q.config)
        .expect("config")
        .payload_schema
}

const ORDER: &str = r#"{"type":"object","required":["amount"],"properties":{"amount":{"type":"integer"},"rush":{"type":"boolean"},"tier":{"enum":["gold","silver"]}}}"#;

async fn the_queue_page_shows_and_edits_the_payload_schema(backend: Backend) {
    let Some(app) = console_on(backend).await else {
        return;
    };
    let addr = &mut Browser {
        addr: app.metrics_addr.expect("the HTTP port is on"),
        cookies: Vec::new(),
    };
    let page = request(addr, "GET", "/queues/orders", &[]).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("none: payloads are opaque bytes"),
        "{}",
        page.body
    );
    let csrf = page.csrf();
    let bad = request(
        addr,
        "POST",
        "/queues/orders/edit",
        &[("csrf", &csrf), ("payload_schema", r#"{"type": 3}"#)],
    )
    .await;
    assert_eq!(bad.status, 400);
    assert!(
        bad.body
            .contains("config.payload_schema: is not a valid JSON Schema"),
        "{}",
        bad.body
    );
    assert_eq!(schema_of(&app, "orders").await, "");
    let saved = request(
        addr,
        "POST",
        "/queues/orders/edit",
        &[("csrf", &csrf), ("payload_schema", ORDER)],
    )
    .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    assert_eq!(schema_of(&app, "orders").await, ORDER);
    let page = request(addr, "GET", "/queues/orders", &[]).await;
    assert!(page.body.contains("id=\"payload-schema\""), "{}", page.body);
    assert!(page.body.contains("&quot;required&quot;"), "{}", page.body);
    // Saving the other limits leaves the schema as it is.
    let again = request(
        addr,
        "POST",
        "/queues/orders/edit",
        &[
            ("csrf", &csrf),
            ("max_concurrent", "2"),
            ("payload_schema", ORDER),
        ],
    )
    .await;
    assert_eq!(again.status, 303, "{}", again.body);
    assert_eq!(schema_of(&app, "orders").await, ORDER);
    app.shutdown().await;
}

async fn the_schedule_form_builds_the_payload_from_the_schema(backend: Backend) {
    let Some(app) = console_on(backend).await else {
        return;
    };
    let addr = &mut Browser {
        addr: app.metrics_addr.expect("the HTTP port is on"),
        cookies: Vec::new(),
    };
    let page = request(addr, "GET", "/queues/orders", &[]).await;
    let csrf = page.csrf();
    let saved = request(
        addr,
        "POST",
        "/queues/orders/edit",
        &[("csrf", &csrf), ("payload_schema", ORDER)],
    )
    .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let base = [
        ("csrf", csrf.as_str()),
        ("schedule_id", "nightly"),
        ("kind", "every"),
        ("every", "1h"),
        ("overlap", "allow"),
        ("misfire", "skip"),
        ("queue", "orders"),
    ];
    // Preview with the queue typed: the schema's inputs replace the textarea.
    let mut preview = base.to_vec();
    preview.push(("preview", "1"));
    let form = request(addr, "POST", "/schedules/new", &preview).await;
    assert_eq!(form.status, 200);
    assert!(form.body.contains("name=\"pf.amount\""), "{}", form.body);
    assert!(form.body.contains("amount *"), "{}", form.body);
    assert!(form.body.contains("name=\"pf.tier\""), "{}", form.body);
    assert!(!form.body.contains("name=\"payload\""), "{}", form.body);
    // A value the schema refuses comes back as one line; nothing is created.
    let mut bad = base.to_vec();
    bad.extend([("payload_fields", "1"), ("pf.amount", "lots")]);
    let refused = request(addr, "POST", "/schedules/new", &bad).await;
    assert_eq!(refused.status, 400);
    assert!(
        refused
            .body
            .contains("task.payload.amount: &quot;lots&quot; is not a whole number"),
        "{}",
        refused.body
    );
    let mut missing = base.to_vec();
    missing.extend([("payload_fields", "1"), ("pf.rush", "true")]);
    let refused = request(addr, "POST", "/schedules/new", &missing).await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.body.contains("schedule.task.payload: /: "),
        "{}",
        refused.body
    );
    let mut good = base.to_vec();
    good.extend([
        ("payload_fields", "1"),
        ("pf.amount", "12"),
        ("pf.rush", "true"),
        ("pf.tier", "\"gold\""),
    ]);
    let created = request(addr, "POST", "/schedules/new", &good).await;
    assert_eq!(created.status, 303, "{}", created.body);
    let s = app
        .schedules()
        .await
        .get_schedule(pb::GetScheduleRequest {
            schedule_id: "nightly".into(),
        })
        .await
        .expect("created")
        .into_inner()
        .schedule
        .expect("schedule");
    let payload: serde_json::Value =
        serde_json::from_slice(&s.task.expect("task").payload).unwrap();
    assert_eq!(
        payload,
        serde_json::json!({"amount": 12, "rush": true, "tier": "gold"})
    );
    // The edit form shows the stored values in the inputs.
    let edit = request(
        addr,
        "GET",
        &format!(
            "{}/edit",
            created.location.unwrap().split('?').next().unwrap()
        ),
        &[],
    )
    .await;
    assert_eq!(edit.status, 200);
    assert!(edit.body.contains("value=\"12\""), "{}", edit.body);
    app.shutdown().await;
}

async fn config_of(app: &TestApp, queue: &str) -> pb::QueueConfig {
    app.admin()
        .await
        .get_queue(pb::GetQueueRequest { name: queue.into() })
        .await
        .expect("get queue")
        .into_inner()
        .queue
        .and_then(|q| q.config)
        .expect("config")
}

async fn a_post_changes_only_the_fields_it_carries(backend: Backend) {
    let Some(app) = console_on(backend).await else {
        return;
    };
    app.admin()
        .await
        .update_queue(pb::UpdateQueueRequest {
            name: "orders".into(),
            config: Some(pb::QueueConfig {
                payload_schema: ORDER.into(),
                bucket: "partner-api".into(),
                max_pending: 50,
                max_concurrent: 3,
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: ["payload_schema", "bucket", "max_pending", "max_concurrent"]
                    .map(String::from)
                    .to_vec(),
            }),
        })
        .await
        .expect("update queue");
    let addr = &mut Browser {
        addr: app.metrics_addr.expect("the HTTP port is on"),
        cookies: Vec::new(),
    };
    let page = request(addr, "GET", "/queues/orders", &[]).await;
    let csrf = page.csrf();
    // Without the schema field (nor any other but one), the rest stays.
    let saved = request(
        addr,
        "POST",
        "/queues/orders/edit",
        &[("csrf", &csrf), ("rate_per_second", "5")],
    )
    .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let c = config_of(&app, "orders").await;
    assert_eq!(c.rate_limit.expect("rate limit").per_second, 5.0);
    assert_eq!(c.payload_schema, ORDER);
    assert_eq!(c.bucket, "partner-api");
    assert_eq!((c.max_pending, c.max_concurrent), (50, 3));
    assert!(
        page.body.contains("name=\"remove_payload_schema\""),
        "a queue with a schema offers the box: {}",
        page.body
    );
    // A blank schema is refused while the queue has one; nothing changes.
    let blank = request(
        addr,
        "POST",
        "/queues/orders/edit",
        &[
            ("csrf", &csrf),
            ("max_concurrent", "8"),
            ("payload_schema", ""),
        ],
    )
    .await;
    assert_eq!(blank.status, 400);
    assert!(
        blank
            .body
            .contains("payload schema: blank while the queue has one"),
        "{}",
        blank.body
    );
    let c = config_of(&app, "orders").await;
    assert_eq!((c.payload_schema.as_str(), c.max_concurrent), (ORDER, 3));
    // The box removes it, and only it.
    let removed = request(
        addr,
        "POST",
        "/queues/orders/edit",
        &[
            ("csrf", &csrf),
            ("payload_schema", ORDER),
            ("remove_payload_schema", "1"),
        ],
    )
    .await;
    assert_eq!(removed.status, 303, "{}", removed.body);
    let c = config_of(&app, "orders").await;
    assert_eq!(c.payload_schema, "");
    assert_eq!(c.bucket, "partner-api");
    assert_eq!(c.max_concurrent, 3);
    let page = request(addr, "GET", "/queues/orders", &[]).await;
    assert!(page.body.contains("none: payloads are opaque bytes"));
    assert!(!page.body.contains("name=\"remove_payload_schema\""));
    app.shutdown().await;
}

all_backends!(
    the_queue_page_shows_and_edits_the_payload_schema,
    a_post_changes_only_the_fields_it_carries,
    the_schedule_form_builds_the_payload_from_the_schema,
);
