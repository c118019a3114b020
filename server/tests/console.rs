//! The web console over real HTTP on the broker's side port: pages and their
//! status codes, escaping, CSRF and same-site refusal, sign-in with auth on, and
//! the actions (cancel, requeue, change, bulk requeue of dead tasks).

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use common::*;
use taskbroker_client::pb;
use taskbroker_server::api::auth::{Role, TokenEntry};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The CSRF token of the first form on the page.
    fn csrf(&self) -> String {
        let at = self
            .body
            .find("name=\"csrf\" value=\"")
            .unwrap_or_else(|| panic!("no csrf field in:\n{}", self.body));
        let rest = &self.body[at + 19..];
        rest[..rest.find('"').unwrap()].to_string()
    }
}

/// A browser with a cookie jar, speaking HTTP/1.1 (one connection per request).
struct Browser {
    addr: SocketAddr,
    cookies: BTreeMap<String, String>,
}

impl Browser {
    fn new(app: &TestApp) -> Self {
        Browser {
            addr: app.metrics_addr.expect("the HTTP port is on"),
            cookies: BTreeMap::new(),
        }
    }

    async fn request(
        &mut self,
        method: &str,
        path: &str,
        extra: &[(&str, &str)],
        body: &str,
    ) -> Resp {
        let mut s = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.addr
        );
        if !self.cookies.is_empty() {
            let c: Vec<String> = self
                .cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            req.push_str(&format!("Cookie: {}\r\n", c.join("; ")));
        }
        for (k, v) in extra {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if method == "POST" {
            req.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
            req.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        req.push_str("\r\n");
        req.push_str(body);
        s.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.unwrap();
        let raw = String::from_utf8(raw).expect("UTF-8 response");
        let (head, body) = raw.split_once("\r\n\r\n").expect("a full response");
        let mut lines = head.lines();
        let status = lines.next().unwrap()[9..12].parse().unwrap();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_lowercase(), v.to_string()))
            .collect();
        for (k, v) in &headers {
            if k == "set-cookie" {
                let pair = v.split(';').next().unwrap();
                let (name, value) = pair.split_once('=').unwrap();
                if value.is_empty() {
                    self.cookies.remove(name);
                } else {
                    self.cookies.insert(name.into(), value.into());
                }
            }
        }
        Resp {
            status,
            headers,
            body: body.to_string(),
        }
    }

    async fn get(&mut self, path: &str) -> Resp {
        self.request("GET", path, &[], "").await
    }

    async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Resp {
        let body: Vec<String> = form
            .iter()
            .map(|(k, v)| format!("{k}={}", encode(v)))
            .collect();
        self.request("POST", path, &[], &body.join("&")).await
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

async fn console_app(auth: Vec<TokenEntry>) -> TestApp {
    spawn_app_with(
        Backend::Sqlite,
        Options {
            metrics: true,
            auth,
            ..Options::default()
        },
    )
    .await
    .expect("sqlite is always available")
}

/// Leases `queue`'s next task and fails it for good with `error`.
async fn kill_one(app: &TestApp, queue: &str, error: &str) -> String {
    let mut c = app.broker().await;
    let t = lease_one(&mut c, queue).await;
    c.fail(pb::FailRequest {
        prefer_same_worker: false,
        task_id: t.task_id.clone(),
        lease_token: t.lease_token,
        error_message: error.into(),
        non_retryable: true,
        retry_after: None,
        lease_next: None,
        cooldown: None,
    })
    .await
    .expect("fail");
    t.task_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_shows_every_queue_with_safe_headers() {
    let app = console_app(Vec::new()).await;
    let mut c = app.broker().await;
    submit(
        &mut c,
        vec![spec("emails"), spec("emails"), spec("reports")],
    )
    .await;
    let mut b = Browser::new(&app);

    let r = b.get("/").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains(">emails</a>") && r.body.contains(">reports</a>"));
    assert!(r.body.contains("hx-get=\"/overview/live\""));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert!(
        r.header("content-security-policy")
            .unwrap()
            .contains("script-src 'self'")
    );
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    let anon = r.header("set-cookie").expect("an anonymous cookie");
    assert!(
        anon.contains("HttpOnly") && anon.contains("SameSite=Strict"),
        "{anon}"
    );

    let live = b.get("/overview/live").await;
    assert_eq!(live.status, 200);
    assert!(live.body.contains("emails") && !live.body.contains("<html"));
    for page in [
        "/tasks",
        "/dead",
        "/workers",
        "/queues",
        "/assets/htmx.min.js",
        "/assets/console.css",
    ] {
        assert_eq!(b.get(page).await.status, 200, "{page}");
    }
    assert_eq!(b.get("/no-such-page").await.status, 404);
    assert_eq!(b.get("/assets/nope.js").await.status, 404);
    assert_eq!(b.get("/tasks/no-such-task").await.status, 404);
    assert_eq!(
        b.get("/metrics").await.status,
        200,
        "metrics stay where they were"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_payload_is_shown_as_text() {
    let app = console_app(Vec::new()).await;
    let mut c = app.broker().await;
    let evil = "<script>alert('owned')</script>";
    let id = submit_one(
        &mut c,
        pb::TaskSpec {
            payload: evil.as_bytes().to_vec(),
            key: "<img src=x onerror=alert(1)>".into(),
            metadata: [("<b>".to_string(), "</td>".to_string())].into(),
            ..spec("xss")
        },
    )
    .await;
    let mut b = Browser::new(&app);
    let r = b.get(&format!("/tasks/{id}")).await;
    assert_eq!(r.status, 200);
    assert!(
        r.body
            .contains("&lt;script&gt;alert('owned')&lt;/script&gt;"),
        "{}",
        r.body
    );
    assert!(!r.body.contains("<script>alert"));
    assert!(!r.body.contains("<img src=x"));
    assert!(!r.body.contains("<b>") && !r.body.contains("</td></dd>"));
    let hex = b.get(&format!("/tasks/{id}?view=hex")).await;
    assert!(hex.body.contains("3c 73 63 72 69 70 74 3e"), "{}", hex.body);
    let list = b.get("/tasks?queue=xss").await;
    assert!(!list.body.contains("<img src=x"));
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_checkpoint_is_shown_escaped() {
    let app = console_app(Vec::new()).await;
    let mut c = app.broker().await;
    let id = submit_one(
        &mut c,
        pb::TaskSpec {
            checkpoint: Some(b"<i>row=7</i>".to_vec()),
            ..spec("seeded")
        },
    )
    .await;
    let plain = submit_one(&mut c, spec("seeded")).await;
    let mut b = Browser::new(&app);
    let r = b.get(&format!("/tasks/{id}")).await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains("id=\"h-checkpoint\""), "{}", r.body);
    assert!(r.body.contains("&lt;i&gt;row=7&lt;/i&gt;"), "{}", r.body);
    assert!(!r.body.contains("<i>row=7"));
    let r = b.get(&format!("/tasks/{plain}")).await;
    assert!(!r.body.contains("id=\"h-checkpoint\""), "{}", r.body);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_filter_and_page_by_keyset() {
    let app = console_app(Vec::new()).await;
    let mut c = app.broker().await;
    let ids = submit(&mut c, (0..60).map(|_| spec("paged")).collect()).await;
    submit(&mut c, vec![spec("other")]).await;
    let mut b = Browser::new(&app);

    let first = b.get("/tasks?queue=paged&state=ready").await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body.matches("href=\"/tasks/").count(), 50);
    assert!(first.body.contains(&ids[59]) && !first.body.contains(&ids[9]));
    let at = first
        .body
        .find("rel=\"next\" href=\"")
        .expect("an older page");
    let rest = &first.body[at + 17..];
    let next = rest[..rest.find('"').unwrap()].replace("&amp;", "&");
    let second = b.get(&next).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.body.matches("href=\"/tasks/").count(), 10);
    assert!(second.body.contains(&ids[0]) && !second.body.contains(&ids[59]));
    assert!(!second.body.contains("rel=\"next\""));

    let none = b.get("/tasks?queue=paged&state=dead").await;
    assert!(none.body.contains("No tasks match."));
    let bad = b.get("/tasks?state=sleeping").await;
    assert_eq!(bad.status, 400);
    assert!(
        bad.body
            .contains("state: &quot;sleeping&quot; is not one of"),
        "{}",
        bad.body
    );
    let bad = b.get("/tasks?from=yesterday").await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("from:"));
    let bad = b.get("/tasks?page=garbage").await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("page_token"));
    let bad = b.get("/tasks?key=k-1").await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("key: choose the queue too"));
    let future = b.get("/tasks?queue=paged&from=2999-01-01T00:00").await;
    assert!(future.body.contains("No tasks match."));
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posts_without_the_csrf_token_or_from_another_site_are_refused() {
    let app = console_app(Vec::new()).await;
    let mut c = app.broker().await;
    let id = submit_one(&mut c, spec("csrf")).await;
    let mut admin = app.admin().await;
    let mut b = Browser::new(&app);
    let page = b.get(&format!("/tasks/{id}/cancel")).await;
    assert_eq!(page.status, 200);
    let token = page.csrf();
    let path = format!("/tasks/{id}/cancel");

    assert_eq!(b.post(&path, &[]).await.status, 403, "no token");
    assert_eq!(
        b.post(&path, &[("csrf", "00")]).await.status,
        403,
        "wrong token"
    );
    let cross = b
        .request(
            "POST",
            &path,
            &[("Origin", "http://evil.example")],
            &format!("csrf={token}"),
        )
        .await;
    assert_eq!(cross.status, 403, "another site");
    let mut stranger = Browser::new(&app);
    assert_eq!(
        stranger.post(&path, &[("csrf", &token)]).await.status,
        403,
        "a token without its cookie"
    );
    assert_eq!(state(&get(&mut admin, &id).await), pb::TaskState::Ready);

    let ok = b.post(&path, &[("csrf", &token)]).await;
    assert_eq!(ok.status, 303, "{}", ok.body);
    assert_eq!(
        ok.header("location"),
        Some(format!("/tasks/{id}?done=cancel").as_str())
    );
    assert_eq!(state(&get(&mut admin, &id).await), pb::TaskState::Cancelled);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_requeued_changed_and_cancelled_after_confirmation() {
    let app = console_app(Vec::new()).await;
    let mut c = app.broker().await;
    let mut admin = app.admin().await;
    let dead = submit_one(&mut c, spec("acts")).await;
    kill_one(&app, "acts", "boom").await;
    let mut b = Browser::new(&app);
    let page = b.get(&format!("/tasks/{dead}")).await;
    assert!(page.body.contains("Requeue…") && page.body.contains("Cancel…"));
    assert!(page.body.contains("boom"));
    let confirm = b.get(&format!("/tasks/{dead}/requeue")).await;
    assert!(confirm.body.contains("Requeue this task?"));
    let token = confirm.csrf();
    let r = b
        .post(&format!("/tasks/{dead}/requeue"), &[("csrf", &token)])
        .await;
    assert_eq!(r.status, 303);
    assert_eq!(state(&get(&mut admin, &dead).await), pb::TaskState::Ready);
    let shown = b.get(r.header("location").unwrap()).await;
    assert!(shown.body.contains("Requeued"));

    let change = format!("/tasks/{dead}/change");
    let review = b
        .post(
            &change,
            &[("csrf", &token), ("priority", "7"), ("step", "review")],
        )
        .await;
    assert_eq!(review.status, 200);
    assert!(review.body.contains("Confirm the change"));
    assert_eq!(
        get(&mut admin, &dead).await.priority,
        0,
        "nothing changes before the confirmation"
    );
    let bad = b
        .post(&change, &[("csrf", &token), ("priority", "high")])
        .await;
    assert_eq!(bad.status, 400);
    assert!(
        bad.body
            .contains("priority: &quot;high&quot; is not a whole number")
    );
    let applied = b
        .post(
            &change,
            &[
                ("csrf", &token),
                ("priority", "7"),
                ("deadline", ""),
                ("run_at", ""),
                ("step", "apply"),
            ],
        )
        .await;
    assert_eq!(applied.status, 303, "{}", applied.body);
    assert_eq!(get(&mut admin, &dead).await.priority, 7);

    // Target: reviewed, applied while the task waits, then cleared with "any"; a
    // label that is not KEY=VALUE is refused naming the field.
    let form = b.get(&change).await;
    assert!(
        form.body.contains("name=\"target_worker\""),
        "{}",
        form.body
    );
    let review = b
        .post(
            &change,
            &[
                ("csrf", &token),
                ("target_worker", "w9"),
                ("target_labels", "gpu=a100"),
                ("step", "review"),
            ],
        )
        .await;
    assert!(
        review.body.contains("worker w9, gpu=a100") && review.body.contains("any worker"),
        "{}",
        review.body
    );
    assert_eq!(get(&mut admin, &dead).await.target, None, "not yet");
    let applied = b
        .post(
            &change,
            &[
                ("csrf", &token),
                ("target_worker", "w9"),
                ("target_labels", "gpu=a100"),
                ("step", "apply"),
            ],
        )
        .await;
    assert_eq!(applied.status, 303, "{}", applied.body);
    let target = get(&mut admin, &dead).await.target.unwrap();
    assert_eq!(target.worker_id, "w9");
    assert_eq!(target.labels.get("gpu").map(String::as_str), Some("a100"));
    let bad = b
        .post(
            &change,
            &[
                ("csrf", &token),
                ("target_labels", "gpu"),
                ("step", "apply"),
            ],
        )
        .await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("target labels"), "{}", bad.body);
    let cleared = b
        .post(
            &change,
            &[
                ("csrf", &token),
                ("target_worker", "any"),
                ("step", "apply"),
            ],
        )
        .await;
    assert_eq!(cleared.status, 303, "{}", cleared.body);
    let target = get(&mut admin, &dead).await.target;
    assert!(target.is_none_or(|t| t.worker_id.is_empty() && t.labels.is_empty()));

    // Max attempts: reviewed, then applied; out of range is refused naming the field.
    let form = b.get(&change).await;
    assert!(form.body.contains("name=\"max_attempts\""), "{}", form.body);
    let review = b
        .post(
            &change,
            &[("csrf", &token), ("max_attempts", "9"), ("step", "review")],
        )
        .await;
    assert!(review.body.contains("Max attempts"), "{}", review.body);
    let policy = async |admin: &mut _| get(admin, &dead).await.retry.unwrap().max_attempts;
    assert_ne!(policy(&mut admin).await, 9);
    let applied = b
        .post(
            &change,
            &[("csrf", &token), ("max_attempts", "9"), ("step", "apply")],
        )
        .await;
    assert_eq!(applied.status, 303, "{}", applied.body);
    assert_eq!(policy(&mut admin).await, 9);
    let refused = b
        .post(
            &change,
            &[("csrf", &token), ("max_attempts", "0"), ("step", "apply")],
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("max_attempts"), "{}", refused.body);
    assert_eq!(policy(&mut admin).await, 9, "nothing changed");

    let r = b
        .post(&format!("/tasks/{dead}/cancel"), &[("csrf", &token)])
        .await;
    assert_eq!(r.status, 303);
    assert_eq!(
        state(&get(&mut admin, &dead).await),
        pb::TaskState::Cancelled
    );
    let again = b
        .post(
            &format!("/tasks/{dead}/change"),
            &[("csrf", &token), ("priority", "1"), ("step", "apply")],
        )
        .await;
    assert_eq!(again.status, 303, "a cancelled task can still be changed");
    assert_eq!(get(&mut admin, &dead).await.priority, 1);
    app.shutdown().await;
}

/// A task whose 3 attempts failed, requeued from its page: the page shows the new
/// budget and no lessee (the last one shows only while the task is finished).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeued_task_shows_its_new_budget_and_no_lessee() {
    let app = console_app(Vec::new()).await;
    let mut c = app.broker().await;
    let id = submit_one(
        &mut c,
        pb::TaskSpec {
            retry: retry_now(3),
            ..spec("rq")
        },
    )
    .await;
    for _ in 0..3 {
        let t = lease_one(&mut c, "rq").await;
        c.fail(pb::FailRequest {
            task_id: t.task_id,
            lease_token: t.lease_token,
            error_message: "boom".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let mut b = Browser::new(&app);
    let dead = b.get(&format!("/tasks/{id}")).await;
    assert!(dead.body.contains("<dd>3 of 3 allowed"), "{}", dead.body);
    assert!(
        dead.body.contains("<dt>Last leased by</dt>"),
        "{}",
        dead.body
    );
    let token = b.get(&format!("/tasks/{id}/requeue")).await.csrf();
    let r = b
        .post(&format!("/tasks/{id}/requeue"), &[("csrf", &token)])
        .await;
    assert_eq!(r.status, 303);
    let ready = b.get(&format!("/tasks/{id}")).await;
    assert!(ready.body.contains("<dd>3 of 6 allowed"), "{}", ready.body);
    assert!(!ready.body.contains("Leased by"), "{}", ready.body);
    assert!(!ready.body.contains("Last leased by"), "{}", ready.body);
    assert!(!ready.body.contains("Lease expires"), "{}", ready.body);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_group_by_error_and_requeue_all_after_the_count() {
    let app = console_app(Vec::new()).await;
    let mut c = app.broker().await;
    submit(&mut c, (0..4).map(|_| spec("dl")).collect()).await;
    for _ in 0..3 {
        kill_one(&app, "dl", "smtp <down>").await;
    }
    kill_one(&app, "dl", "bad address").await;
    let mut b = Browser::new(&app);
    let page = b.get("/dead").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("smtp &lt;down&gt;") && page.body.contains("bad address"));
    assert!(page.body.contains("Requeue all 3…"));
    let first = page.body.find("smtp &lt;down&gt;").unwrap();
    assert!(
        first < page.body.find("bad address").unwrap(),
        "largest group first"
    );

    let confirm = b
        .get("/dead/requeue?queue=dl&error=smtp%20%3Cdown%3E")
        .await;
    assert_eq!(confirm.status, 200);
    assert!(
        confirm.body.contains("Requeue 3 dead tasks?"),
        "{}",
        confirm.body
    );
    let token = confirm.csrf();
    let r = b
        .post(
            "/dead/requeue",
            &[("csrf", &token), ("queue", "dl"), ("error", "smtp <down>")],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let after = b.get(r.header("location").unwrap()).await;
    assert!(
        after.body.contains("Requeued 3 dead tasks."),
        "{}",
        after.body
    );
    assert!(!after.body.contains("smtp &lt;down&gt;"));
    assert!(after.body.contains("bad address"));
    assert_eq!(
        lease(&mut c, "dl", 10).await.len(),
        3,
        "the requeued tasks run again"
    );
    let bad = b
        .post(
            "/dead/requeue",
            &[("csrf", &token), ("queue", "bad queue!"), ("error", "")],
        )
        .await;
    assert_eq!(bad.status, 400);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_are_listed_from_their_leases() {
    let app = console_app(Vec::new()).await;
    let mut c = app.broker().await;
    submit(&mut c, vec![spec("wk"), spec("wk")]).await;
    lease(&mut c, "wk", 2).await;
    let mut b = Browser::new(&app);
    let r = b.get("/workers").await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains(">w1</a></th>"), "{}", r.body);
    assert!(r.body.contains(">2 tasks</a>"));
    let running = b.get("/tasks?worker=w1&state=leased").await;
    assert_eq!(
        running.body.matches("<tr>").count(),
        3,
        "header and two tasks"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_on_the_console_needs_an_admin_token() {
    let admin_token = "console-admin-token-123456";
    let app = console_app(vec![
        TokenEntry {
            role: Role::Admin,
            token: admin_token.into(),
            name: Some("ops".into()),
            workers: None,
            queues: None,
        },
        TokenEntry {
            role: Role::Worker,
            token: "console-worker-token-123456".into(),
            name: None,
            workers: None,
            queues: None,
        },
    ])
    .await;
    let mut b = Browser::new(&app);
    let r = b.get("/tasks?queue=a").await;
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/login?next=/tasks%3Fqueue%3Da"));
    assert_eq!(b.get("/overview/live").await.status, 303);
    let htmx = b
        .request("GET", "/overview/live", &[("HX-Request", "true")], "")
        .await;
    assert_eq!(htmx.status, 401);
    assert_eq!(htmx.header("hx-redirect"), Some("/login"));
    assert_eq!(b.post("/dead/requeue", &[("queue", "a")]).await.status, 401);

    let login = b.get("/login?next=/tasks").await;
    assert_eq!(login.status, 200);
    let token = login.csrf();
    let refused = b
        .post(
            "/login",
            &[
                ("csrf", &token),
                ("token", "wrong-token-000000000"),
                ("next", "/tasks"),
            ],
        )
        .await;
    assert_eq!(refused.status, 401);
    assert!(refused.body.contains("not valid"));
    let worker = b
        .post(
            "/login",
            &[("csrf", &token), ("token", "console-worker-token-123456")],
        )
        .await;
    assert_eq!(worker.status, 401);
    assert!(worker.body.contains("not an admin token"));
    assert_eq!(b.get("/").await.status, 303, "still signed out");
    assert_eq!(
        b.post("/login", &[("token", admin_token)]).await.status,
        403,
        "sign-in needs the CSRF token too"
    );

    let ok = b
        .post(
            "/login",
            &[("csrf", &token), ("token", admin_token), ("next", "/tasks")],
        )
        .await;
    assert_eq!(ok.status, 303);
    assert_eq!(ok.header("location"), Some("/tasks"));
    let cookie = ok
        .headers
        .iter()
        .find(|(k, v)| k == "set-cookie" && v.starts_with("tb_session="))
        .map(|(_, v)| v.clone())
        .expect("a session cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains(admin_token), "the cookie is not the token");
    let home = b.get("/").await;
    assert_eq!(home.status, 200);
    assert!(home.body.contains("Signed in as ops"));
    assert!(!home.body.contains(admin_token));

    let out = b.post("/logout", &[("csrf", &home.csrf())]).await;
    assert_eq!(out.status, 303);
    assert_eq!(b.get("/").await.status, 303, "signed out again");
    app.shutdown().await;
}

/// `next` after sign-in: a path on this site stays; anything a browser could read as
/// another site (tabs and newlines it drops, `\\` it reads as `/`, `//host`,
/// schemes, the same percent-encoded once or twice) goes to `/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_redirects_only_to_paths_on_this_site() {
    let admin_token = "console-admin-token-123456";
    let app = console_app(vec![TokenEntry {
        role: Role::Admin,
        token: admin_token.into(),
        name: Some("ops".into()),
        workers: None,
        queues: None,
    }])
    .await;
    let mut b = Browser::new(&app);
    let kept = [
        "/tasks?state=dead",
        "/tasks/t-1?tab=runs#history",
        "/tasks?queue=caf%C3%A9",
        "/a%2Fb",
        "/",
    ];
    let hostile = [
        "/\t/evil.example/phish",
        "/\n/evil.example",
        "/\r\n/evil.example",
        "\t//evil.example",
        " //evil.example",
        "/ /evil.example",
        "//evil.example",
        "///evil.example",
        "/\\evil.example",
        "\\/evil.example",
        "/\\/evil.example",
        "/x\\..\\..\\evil",
        "/\u{0}/evil.example",
        "/\u{7f}/evil.example",
        "/\u{3000}/evil.example",
        "https://evil.example",
        "HTTPS://evil.example/",
        "javascript:alert(1)",
        "data:text/html,x",
        "evil.example",
        "",
        "/%09/evil.example/phish",
        "/%0A/evil.example",
        "/%0d%0a/evil.example",
        "/%2F/evil.example",
        "/%2f%2fevil.example",
        "%2F%2Fevil.example",
        "/%5Cevil.example",
        "/%5c/evil.example",
        "/%2509/evil.example",
        "/%252F/evil.example",
        "/%25252F/evil.example",
        "/%00/evil.example",
    ];
    let cases = kept
        .iter()
        .map(|n| (*n, *n))
        .chain(hostile.iter().map(|n| (*n, "/")));
    for (next, expected) in cases {
        let page = b.get(&format!("/login?next={}", encode(next))).await;
        assert_eq!(page.status, 200, "{next:?}");
        let hidden = format!("name=\"next\" value=\"{}\"", expected.replace('&', "&amp;"));
        assert!(page.body.contains(&hidden), "{next:?}: {}", page.body);
        let signed_in = b
            .post(
                "/login",
                &[
                    ("csrf", &page.csrf()),
                    ("token", admin_token),
                    ("next", next),
                ],
            )
            .await;
        assert_eq!(signed_in.status, 303, "{next:?}");
        assert_eq!(signed_in.header("location"), Some(expected), "{next:?}");
    }
    app.shutdown().await;
}

fn nightly(id: &str, queue: &str) -> pb::Schedule {
    pb::Schedule {
        schedule_id: id.into(),
        spec: Some(pb::ScheduleSpec {
            kind: Some(pb::schedule_spec::Kind::Cron("0 3 * * *".into())),
            timezone: "Europe/Berlin".into(),
            anchor: None,
        }),
        task: Some(pb::TaskTemplate {
            queue: queue.into(),
            payload: b"{}".to_vec(),
            metadata: [("note".to_string(), "<script>x</script>".to_string())].into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The first task link in a piece of a page.
fn s_task_id(html: &str) -> String {
    let at = html.find("href=\"/tasks/").expect("a task link") + 13;
    html[at..at + html[at..].find('"').unwrap()].to_string()
}

async fn schedule_now(app: &TestApp) -> pb::Schedule {
    app.schedules()
        .await
        .get_schedule(pb::GetScheduleRequest {
            schedule_id: "nightly".into(),
        })
        .await
        .expect("get schedule")
        .into_inner()
        .schedule
        .expect("a schedule")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_are_paused_triggered_resumed_and_deleted_after_confirmation() {
    let app = console_app(Vec::new()).await;
    let mut sc = app.schedules().await;
    for id in ["nightly", "other"] {
        sc.create_schedule(pb::CreateScheduleRequest {
            schedule: Some(nightly(id, "reports")),
        })
        .await
        .expect("create");
    }
    let get_state = |s: pb::Schedule| pb::ScheduleState::try_from(s.state).unwrap();
    let mut b = Browser::new(&app);
    let list = b.get("/schedules").await;
    assert_eq!(list.status, 200);
    assert!(
        list.body.contains("href=\"/schedules/nightly\""),
        "{}",
        list.body
    );
    assert!(list.body.contains("0 3 * * *") && list.body.contains("Europe/Berlin"));
    assert!(
        list.body
            .contains("Pause…<span class=\"vh\"> nightly</span>")
    );
    assert!(list.body.contains("aria-current=\"page\">Schedules"));
    let page = b.get("/schedules/nightly").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("badge active") && page.body.contains("No runs yet."));
    // A zoned schedule's times are shown on its zone's clock beside UTC: the
    // next fire is 03:00 in Berlin, whatever the UTC offset that day.
    assert!(
        page.body.contains("Next fire (UTC; Europe/Berlin)")
            && page.body.contains(" 03:00:00 Europe/Berlin)</span>"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("&lt;script&gt;x&lt;/script&gt;"),
        "metadata escaped"
    );
    assert!(page.body.contains("href=\"/tasks?schedule=nightly\""));

    let confirm = b.get("/schedules/nightly/pause").await;
    assert!(confirm.body.contains("Pause this schedule?"));
    let token = confirm.csrf();
    let r = b
        .post("/schedules/nightly/pause", &[("csrf", "wrong")])
        .await;
    assert_eq!(r.status, 403, "a wrong CSRF token changes nothing");
    assert_eq!(
        get_state(schedule_now(&app).await),
        pb::ScheduleState::Active
    );
    let r = b
        .post("/schedules/nightly/pause", &[("csrf", &token)])
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(
        get_state(schedule_now(&app).await),
        pb::ScheduleState::Paused
    );
    let shown = b.get(r.header("location").unwrap()).await;
    assert!(shown.body.contains("Paused: nothing fires") && shown.body.contains("Resume…"));

    let r = b
        .post("/schedules/nightly/trigger", &[("csrf", &token)])
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let s = schedule_now(&app).await;
    assert_eq!((s.runs, get_state(s)), (1, pb::ScheduleState::Paused));
    let shown = b.get(r.header("location").unwrap()).await;
    assert!(shown.body.contains("Triggered"));
    let runs = &shown.body[shown.body.find("id=\"runs\"").expect("a run history")..];
    assert!(
        runs.contains("badge ready") && runs.contains(">trigger<"),
        "{runs}"
    );
    assert!(runs.contains(">Last error<"), "an error column: {runs}");
    // The run's task fails for good: its error shows in the run history.
    kill_one(&app, "reports", "smtp <refused>").await;
    let failed = b.get("/schedules/nightly").await;
    let failed = &failed.body[failed.body.find("id=\"runs\"").expect("a run history")..];
    assert!(
        failed.contains("badge dead") && failed.contains("smtp &lt;refused&gt;"),
        "{failed}"
    );
    let made = b.get("/tasks?schedule=nightly").await;
    assert_eq!(made.status, 200);
    let rows = &made.body[made.body.find("id=\"tasks\"").expect("a task table")..];
    assert_eq!(
        rows.matches("<tr>").count(),
        2,
        "a header and the one run: {rows}"
    );
    let task_id = s_task_id(runs);
    assert!(
        rows.contains(&task_id),
        "the run's task {task_id} is listed"
    );
    let task_page = b.get(&format!("/tasks/{task_id}")).await;
    assert!(task_page.body.contains("href=\"/schedules/nightly\""));
    assert!(
        b.get("/tasks?schedule=other")
            .await
            .body
            .contains("No tasks match.")
    );
    assert_eq!(b.get("/tasks?schedule=bad%20id!").await.status, 400);

    let r = b
        .post("/schedules/nightly/resume", &[("csrf", &token)])
        .await;
    assert_eq!(r.status, 303);
    let s = schedule_now(&app).await;
    assert!(s.next_fire_at.is_some());
    assert_eq!(get_state(s), pb::ScheduleState::Active);

    let confirm = b.get("/schedules/nightly/delete").await;
    assert!(confirm.body.contains("Delete this schedule?") && confirm.body.contains("Tasks it"));
    let r = b
        .post("/schedules/nightly/delete", &[("csrf", &token)])
        .await;
    assert_eq!(r.status, 303);
    let after = b.get(r.header("location").unwrap()).await;
    assert!(after.body.contains("Deleted schedule nightly."));
    assert!(!after.body.contains("href=\"/schedules/nightly\""));
    assert!(after.body.contains("href=\"/schedules/other\""));
    assert_eq!(b.get("/schedules/nightly").await.status, 404);
    assert_eq!(
        b.post("/schedules/nightly/trigger", &[("csrf", &token)])
            .await
            .status,
        404
    );
    assert_eq!(b.get("/schedules/bad%20id!").await.status, 400);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_cancelled_by_group_after_the_count_or_one_by_one() {
    let app = console_app(Vec::new()).await;
    let mut c = app.broker().await;
    let mut admin = app.admin().await;
    submit(&mut c, (0..3).map(|_| spec("dc")).collect()).await;
    for _ in 0..2 {
        kill_one(&app, "dc", "gone").await;
    }
    let one = kill_one(&app, "dc", "alone").await;
    let mut b = Browser::new(&app);
    let page = b.get("/dead").await;
    assert!(page.body.contains("Cancel all 2…"), "{}", page.body);
    let confirm = b.get("/dead/cancel?queue=dc&error=gone").await;
    assert_eq!(confirm.status, 200);
    assert!(
        confirm.body.contains("Cancel 2 dead tasks?"),
        "{}",
        confirm.body
    );
    assert!(confirm.body.contains("can still be requeued"));
    let token = confirm.csrf();
    let r = b
        .post(
            "/dead/cancel",
            &[("csrf", &token), ("queue", "dc"), ("error", "gone")],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let after = b.get(r.header("location").unwrap()).await;
    assert!(
        after.body.contains("Cancelled 2 dead tasks."),
        "{}",
        after.body
    );
    assert!(!after.body.contains(">gone<") && after.body.contains("alone"));
    let cancelled = admin
        .list_tasks(pb::ListTasksRequest {
            queue: "dc".into(),
            states: vec![pb::TaskState::Cancelled as i32],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert_eq!(cancelled.len(), 2);
    assert!(
        cancelled.iter().all(|t| t.last_error == "gone"),
        "the reason is kept"
    );

    let task = b.get(&format!("/tasks/{one}")).await;
    assert!(task.body.contains("Cancel…") && task.body.contains("Requeue…"));
    let confirm = b.get(&format!("/tasks/{one}/cancel")).await;
    assert!(confirm.body.contains("takes it off the dead-letter list"));
    let r = b
        .post(&format!("/tasks/{one}/cancel"), &[("csrf", &token)])
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(
        state(&get(&mut admin, &one).await),
        pb::TaskState::Cancelled
    );
    assert!(b.get("/dead").await.body.contains("No dead tasks."));
    let again = b
        .post(&format!("/tasks/{one}/cancel"), &[("csrf", &token)])
        .await;
    assert_eq!(again.status, 303, "cancelling again is a no-op");
    assert_eq!(
        state(&get(&mut admin, &one).await),
        pb::TaskState::Cancelled
    );
    app.shutdown().await;
}

// ---- Queues, workers and Explain, on both stores ----

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

async fn queue_config(app: &TestApp, name: &str) -> pb::QueueConfig {
    app.admin()
        .await
        .get_queue(pb::GetQueueRequest { name: name.into() })
        .await
        .expect("get queue")
        .into_inner()
        .queue
        .expect("queue")
        .config
        .expect("config")
}

async fn queues_are_paused_resumed_and_edited_from_the_console(backend: Backend) {
    let Some(app) = console_on(backend).await else {
        return;
    };
    let mut c = app.broker().await;
    submit(&mut c, vec![spec("qp"), spec("qp")]).await;
    let mut b = Browser::new(&app);
    let list = b.get("/queues").await;
    assert_eq!(list.status, 200);
    assert!(list.body.contains("href=\"/queues/qp\""), "{}", list.body);
    assert!(list.body.contains("badge active"));
    let overview = b.get("/").await;
    assert!(
        overview.body.contains("href=\"/queues\""),
        "linked from the overview"
    );

    let confirm = b.get("/queues/qp/pause").await;
    assert_eq!(confirm.status, 200);
    assert!(confirm.body.contains("Pause this queue?"));
    assert!(
        !queue_config(&app, "qp").await.paused,
        "nothing before the POST"
    );
    let token = confirm.csrf();
    let refused = b.post("/queues/qp/pause", &[]).await;
    assert_eq!(refused.status, 403, "no CSRF token, no pause");
    let r = b.post("/queues/qp/pause", &[("csrf", &token)]).await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(queue_config(&app, "qp").await.paused);
    assert!(lease(&mut c, "qp", 1).await.is_empty(), "paused: no lease");
    let shown = b.get(r.header("location").unwrap()).await;
    assert!(shown.body.contains("badge paused") && shown.body.contains("Resume…"));
    assert!(
        b.get("/").await.body.contains("badge paused"),
        "the overview says so"
    );

    // The limits form: bad text and values the service refuses, one line each.
    let bad = b
        .post(
            "/queues/qp/edit",
            &[("csrf", &token), ("max_concurrent", "lots")],
        )
        .await;
    assert_eq!(bad.status, 400);
    assert!(
        bad.body
            .contains("max concurrent: &quot;lots&quot; is not a whole number"),
        "{}",
        bad.body
    );
    let refused = b
        .post(
            "/queues/qp/edit",
            &[("csrf", &token), ("rate_per_second", "-2")],
        )
        .await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.body.contains("rate_limit.per_second"),
        "{}",
        refused.body
    );
    assert_eq!(queue_config(&app, "qp").await.max_concurrent, 0);
    let saved = b
        .post(
            "/queues/qp/edit",
            &[
                ("csrf", &token),
                ("max_concurrent", "1"),
                ("rate_per_second", ""),
                ("fairness", "round_robin_keys"),
                ("priority_aging", "30s"),
            ],
        )
        .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let cfg = queue_config(&app, "qp").await;
    assert_eq!(cfg.max_concurrent, 1);
    assert!(cfg.paused, "the edit leaves the pause alone");
    assert!(
        b.get("/queues/qp")
            .await
            .body
            .contains("+1 priority every 30.0 s")
    );

    let r = b.post("/queues/qp/resume", &[("csrf", &token)]).await;
    assert_eq!(r.status, 303);
    assert!(!queue_config(&app, "qp").await.paused);
    assert_eq!(
        lease(&mut c, "qp", 2).await.len(),
        1,
        "resumed, one at a time"
    );
    app.shutdown().await;
}

async fn workers_show_their_labels_and_leases(backend: Backend) {
    let Some(app) = console_on(backend).await else {
        return;
    };
    let mut c = app.broker().await;
    let ids = submit(&mut c, vec![spec("wk"), spec("wk")]).await;
    let mut req = lease_req("wk", 1);
    req.worker_id = "gpu-7".into();
    req.labels = [("gpu".to_string(), "a100".to_string())].into();
    let held = c.lease(req).await.expect("lease").into_inner().tasks;
    assert_eq!(held.len(), 1);
    let mut b = Browser::new(&app);
    let r = b.get("/workers").await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains(">gpu-7</a>"), "{}", r.body);
    assert!(r.body.contains("gpu=a100"));
    assert!(r.body.contains("127.0.0.1"), "its address");
    let link = format!("href=\"/tasks/{}\"", held[0].task_id);
    assert!(r.body.contains(&link), "its lease links to the task");
    let other = ids.iter().find(|i| **i != held[0].task_id).unwrap();
    assert!(
        !r.body.contains(&format!("/tasks/{other}")),
        "not a task it does not hold"
    );
    let one = b.get("/workers/gpu-7").await;
    assert_eq!(one.status, 200);
    assert!(one.body.contains(&link) && one.body.contains(">wk<"));
    assert_eq!(b.get("/workers/nobody").await.status, 404);
    assert!(!b.get("/workers?queue=other").await.body.contains("gpu-7"));
    app.shutdown().await;
}

async fn a_waiting_task_says_why_it_is_not_running(backend: Backend) {
    let Some(app) = console_on(backend).await else {
        return;
    };
    let mut c = app.broker().await;
    let mut admin = app.admin().await;
    admin
        .update_queue(pb::UpdateQueueRequest {
            name: "held".into(),
            config: Some(pb::QueueConfig {
                paused: true,
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["paused".into()],
            }),
        })
        .await
        .expect("pause");
    let waiting = submit_one(&mut c, spec("held")).await;
    let free = submit_one(&mut c, spec("free")).await;
    let mut b = Browser::new(&app);
    let page = b.get(&format!("/tasks/{waiting}")).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Why is it not running?"));
    assert!(
        page.body.contains("data-gate=\"QueuePaused\""),
        "{}",
        page.body
    );
    assert!(page.body.contains("queue held is paused"));
    // A paused queue has a gate: the gated lease takes its tasks.
    assert!(page.body.contains("data-path=\"gated\""), "{}", page.body);
    let ready = b.get(&format!("/tasks/{free}")).await;
    assert!(ready.body.contains("a worker asking now would get it"));
    assert!(ready.body.contains("data-path=\"plain\""), "{}", ready.body);
    lease_one(&mut c, "free").await;
    let running = b.get(&format!("/tasks/{free}")).await;
    assert!(
        !running.body.contains("Why is it not running?"),
        "a leased task has no gates"
    );
    app.shutdown().await;
}

// ---- Event history on the task page, on both stores ----

/// The kinds in the history table of a task page, in page order.
fn history_kinds(html: &str) -> Vec<String> {
    let Some(at) = html.find("<table id=\"history\">") else {
        return Vec::new();
    };
    let table = &html[at..at + html[at..].find("</table>").expect("a closed table")];
    table
        .split("data-kind=\"")
        .skip(1)
        .map(|rest| rest[..rest.find('"').unwrap()].to_uppercase())
        .collect()
}

async fn a_task_page_shows_its_event_history(backend: Backend) {
    let Some(app) = console_on(backend).await else {
        return;
    };
    let mut c = app.broker().await;
    let id = submit_one(&mut c, spec("hist")).await;
    let mut b = Browser::new(&app);
    let fresh = b.get(&format!("/tasks/{id}")).await;
    assert_eq!(fresh.status, 200);
    assert_eq!(history_kinds(&fresh.body), ["SUBMITTED"], "{}", fresh.body);

    let mut req = lease_req("hist", 1);
    req.worker_id = "hist-worker".into();
    let t = c.lease(req).await.expect("lease").into_inner().tasks;
    assert_eq!(t.len(), 1);
    c.complete(pb::CompleteRequest {
        task_id: id.clone(),
        lease_token: t[0].lease_token.clone(),
        result: vec![],
        lease_next: None,
    })
    .await
    .expect("complete");
    let page = b.get(&format!("/tasks/{id}")).await;
    assert_eq!(page.status, 200);
    assert_eq!(
        history_kinds(&page.body),
        ["SUBMITTED", "LEASED", "SUCCEEDED"],
        "oldest first: {}",
        page.body
    );
    assert!(
        page.body
            .contains("<caption>Events of this task, oldest first</caption>")
    );
    assert!(page.body.contains("<th scope=\"col\">Kind</th>"));
    assert!(
        page.body.contains(">hist-worker<"),
        "the worker that leased it"
    );
    assert!(
        page.body.contains("badge succeeded"),
        "the state after each event"
    );
    assert!(
        !page.body.contains("id=\"history-note\""),
        "all of it shown"
    );

    // The detail (a failure's error) is escaped like the rest of the page.
    submit_one(&mut c, spec("hist-bad")).await;
    let dead = kill_one(&app, "hist-bad", "<img src=x onerror=alert(1)>").await;
    let page = b.get(&format!("/tasks/{dead}")).await;
    assert_eq!(
        history_kinds(&page.body),
        ["SUBMITTED", "LEASED", "FAILED", "DEAD"],
        "{}",
        page.body
    );
    assert!(!page.body.contains("<img src=x"), "{}", page.body);
    assert!(page.body.contains("&lt;img src=x onerror=alert(1)&gt;"));
    app.shutdown().await;
}

/// The fire times a page shows, in order (the `datetime` of each `<time>`).
fn shown_times(html: &str) -> Vec<chrono::DateTime<chrono::Utc>> {
    html.split("<time datetime=\"")
        .skip(1)
        .map(|rest| {
            let t = &rest[..rest.find('"').unwrap()];
            chrono::DateTime::parse_from_rfc3339(t).unwrap().into()
        })
        .collect()
}

async fn get_schedule(app: &TestApp, id: &str) -> Result<pb::Schedule, tonic::Status> {
    Ok(app
        .schedules()
        .await
        .get_schedule(pb::GetScheduleRequest {
            schedule_id: id.into(),
        })
        .await?
        .into_inner()
        .schedule
        .expect("a schedule"))
}

async fn schedules_are_created_and_edited_from_the_form(backend: Backend) {
    let Some(app) = console_on(backend).await else {
        return;
    };
    let mut b = Browser::new(&app);
    let form = b.get("/schedules/new").await;
    assert_eq!(form.status, 200);
    assert!(
        form.body.contains("hx-post=\"/schedules/preview\""),
        "{}",
        form.body
    );
    // Nothing typed yet: no validation shows, only where the preview will be.
    assert!(
        form.body.contains("id=\"preview-hint\"")
            && !form.body.contains("preview-error")
            && !form.body.contains("is required"),
        "{}",
        form.body
    );
    let csrf = form.csrf();
    let base = [
        ("csrf", csrf.as_str()),
        ("schedule_id", "berlin"),
        ("kind", "cron"),
        ("cron", "0 3 * * *"),
        ("timezone", "Europe/Berlin"),
        ("overlap", "skip"),
        ("misfire", "catch_up"),
        ("catchup_window", "2h"),
        ("queue", "emails"),
        ("payload", "{\"to\":\"a@example.com\"}"),
        ("priority", "4"),
        ("max_attempts", "5"),
        ("deadline_after", "10m"),
        ("metadata", "team=ops\r\nnote=<b>"),
    ];
    let with = |changes: &[(&'static str, &'static str)]| {
        let mut f: Vec<(&str, &str)> = base.to_vec();
        for &(k, v) in changes {
            match f.iter_mut().find(|(fk, _)| *fk == k) {
                Some(e) => e.1 = v,
                None => f.push((k, v)),
            }
        }
        f
    };

    // The preview is PreviewSchedule's answer, as a fragment.
    let preview = b.post("/schedules/preview", &base).await;
    assert_eq!(preview.status, 200, "{}", preview.body);
    assert!(!preview.body.contains("<html"), "a fragment");
    let expected: Vec<_> = app
        .schedules()
        .await
        .preview_schedule(pb::PreviewScheduleRequest {
            spec: nightly("x", "q").spec.map(|mut s| {
                s.timezone = "Europe/Berlin".into();
                s
            }),
            count: 5,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .fire_times
        .iter()
        .map(|t| from_ts(&Some(*t)))
        .collect();
    assert_eq!(expected.len(), 5);
    assert_eq!(shown_times(&preview.body), expected);
    let bad = b
        .post("/schedules/preview", &with(&[("cron", "61 * * * *")]))
        .await;
    assert!(bad.body.contains("id=\"preview-error\""), "{}", bad.body);
    assert!(bad.body.contains("spec.cron"), "{}", bad.body);
    // Once something was typed, a cron line left empty is named.
    let cleared = b.post("/schedules/preview", &with(&[("cron", "")])).await;
    assert!(
        cleared.body.contains("spec.cron: is required"),
        "{}",
        cleared.body
    );

    // Bad input: one line naming the field, the form as typed, nothing created.
    for (changes, field) in [
        (vec![("cron", "61 * * * *")], "schedule.spec.cron: "),
        (
            vec![("timezone", "Mars/Olympus")],
            "schedule.spec.timezone: ",
        ),
        (vec![("kind", "every"), ("every", "soon")], "spec.every: "),
        (vec![("deadline_after", "later")], "task.deadline_after: "),
        (vec![("queue", "no spaces")], "schedule.task.queue: "),
        (vec![("priority", "99999999999")], "task.priority: "),
        (vec![("catchup_window", "30d")], "schedule.catchup_window: "),
        (vec![("misfire", "<script>")], "misfire: "),
        (vec![("fanout", "lots")], "task.fanout: "),
        (vec![("fanout", "1001")], "schedule.task.fanout.copies: "),
        (vec![("sticky", "sometimes")], "task.sticky: "),
        (vec![("key", "r-{nope}")], "schedule.task.key: "),
        (
            vec![("key", "r-{fire_time}"), ("fanout", "2")],
            "schedule.task.key: ",
        ),
        (
            vec![("target_labels", "no equals sign")],
            "task.target_labels: ",
        ),
    ] {
        let r = b.post("/schedules/new", &with(&changes)).await;
        assert_eq!(r.status, 400, "{changes:?}: {}", r.body);
        let at = r.body.find("role=\"alert\">").expect("an alert") + 13;
        let line = &r.body[at..at + r.body[at..].find("</p>").unwrap()];
        assert!(line.starts_with(field), "{changes:?}: {line}");
        assert!(!line.contains('\n') && !line.contains("<script>"), "{line}");
        assert!(r.body.contains("value=\"berlin\""), "the form as typed");
        assert_eq!(
            get_schedule(&app, "berlin").await.unwrap_err().code(),
            tonic::Code::NotFound,
            "{changes:?} created nothing"
        );
    }
    // Hostile sizes are the service's limits, refused the same way.
    let many: String = (0..65).map(|i| format!("k{i}=v\n")).collect();
    let big = "x".repeat(40 * 1024);
    for (name, value, field) in [
        ("metadata", many.as_str(), "schedule.task.metadata: "),
        (
            "metadata",
            &format!("k={big}")[..],
            "schedule.task.metadata: ",
        ),
    ] {
        let mut f = base.to_vec();
        f.retain(|(k, _)| *k != name);
        f.push((name, value));
        let r = b.post("/schedules/new", &f).await;
        assert_eq!(r.status, 400, "{}", &r.body[..200.min(r.body.len())]);
        assert!(r.body.contains(field), "{field}");
    }
    let huge = "y".repeat(70 * 1024);
    let mut f = base.to_vec();
    f.retain(|(k, _)| *k != "payload");
    f.push(("payload", &huge));
    let r = b.post("/schedules/new", &f).await;
    assert_eq!(
        r.status, 413,
        "a form larger than the console reads is refused"
    );
    assert_eq!(
        get_schedule(&app, "berlin").await.unwrap_err().code(),
        tonic::Code::NotFound
    );

    // The Preview button without JavaScript: the page again, nothing created.
    let r = b.post("/schedules/new", &with(&[("preview", "1")])).await;
    assert_eq!(r.status, 200);
    assert_eq!(shown_times(&r.body), expected);
    assert!(get_schedule(&app, "berlin").await.is_err());
    // Without the CSRF field, refused by the guard.
    let no_csrf: Vec<_> = base.iter().copied().filter(|(k, _)| *k != "csrf").collect();
    assert_eq!(b.post("/schedules/new", &no_csrf).await.status, 403);
    assert!(get_schedule(&app, "berlin").await.is_err());

    let created = b.post("/schedules/new", &base).await;
    assert_eq!(created.status, 303, "{}", created.body);
    assert_eq!(
        created.header("location"),
        Some("/schedules/berlin?done=create")
    );
    let s = get_schedule(&app, "berlin").await.unwrap();
    let spec = s.spec.clone().unwrap();
    assert_eq!(
        spec.kind,
        Some(pb::schedule_spec::Kind::Cron("0 3 * * *".into()))
    );
    assert_eq!(spec.timezone, "Europe/Berlin");
    assert_eq!(from_ts(&s.next_fire_at), expected[0]);
    assert_eq!(s.misfire, pb::MisfirePolicy::CatchUp as i32);
    assert_eq!(s.catchup_window, secs(7200));
    let t = s.task.clone().unwrap();
    assert_eq!(t.queue, "emails");
    assert_eq!(t.payload, b"{\"to\":\"a@example.com\"}");
    assert_eq!(t.priority, 4);
    assert_eq!(t.retry.as_ref().unwrap().max_attempts, 5);
    assert_eq!(t.deadline_after, secs(600));
    assert_eq!(t.metadata["team"], "ops");
    assert_eq!(t.metadata["note"], "<b>");
    let again = b.post("/schedules/new", &base).await;
    assert_eq!(again.status, 400);
    assert!(again.body.contains("already exists"), "{}", again.body);

    // Edit: the form is filled from the schedule; only the changed fields are saved.
    let edit = b.get("/schedules/berlin/edit").await;
    assert_eq!(edit.status, 200);
    assert!(edit.body.contains("value=\"0 3 * * *\"") && edit.body.contains("note=&lt;b&gt;"));
    let unchanged = b.post("/schedules/berlin/edit", &base).await;
    assert_eq!(
        unchanged.header("location"),
        Some("/schedules/berlin?done=unchanged")
    );
    let saved = b
        .post(
            "/schedules/berlin/edit",
            &with(&[("kind", "every"), ("every", "15m"), ("max_runs", "3")]),
        )
        .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    assert_eq!(
        saved.header("location"),
        Some("/schedules/berlin?done=edit")
    );
    let after = get_schedule(&app, "berlin").await.unwrap();
    assert_eq!(
        after.spec.unwrap().kind,
        Some(pb::schedule_spec::Kind::Every(prost_types::Duration {
            seconds: 900,
            nanos: 0
        }))
    );
    assert_eq!(after.max_runs, 3);
    assert_eq!(after.task, s.task, "the template is untouched");
    let refused = b
        .post("/schedules/berlin/edit", &with(&[("cron", "* * *")]))
        .await;
    assert_eq!(refused.status, 400);
    assert_eq!(get_schedule(&app, "berlin").await.unwrap().max_runs, 3);
    assert_eq!(b.get("/schedules/nobody/edit").await.status, 404);
    app.shutdown().await;
}

/// The template's routing, fan-out, concurrency key and key template are in
/// the form; an edit keeps what the form does not show (a SOFT sticky timeout,
/// a fan-out's distinct_workers) and saves what it changes.
async fn schedule_form_edits_keep_the_routing_the_form_does_not_show(backend: Backend) {
    let Some(app) = console_on(backend).await else {
        return;
    };
    let mut c = app.schedules().await;
    let mut s = nightly("wide", "gpu");
    s.task = Some(pb::TaskTemplate {
        target: Some(pb::Target {
            worker_id: String::new(),
            labels: [("gpu".to_string(), "a100".to_string())].into(),
        }),
        sticky: Some(pb::StickyPolicy {
            strategy: pb::StickyStrategy::Soft as i32,
            timeout: secs(90),
        }),
        fanout: Some(pb::Fanout {
            copies: 3,
            distinct_workers: true,
        }),
        concurrency_key: "tenant-1".into(),
        ..s.task.unwrap()
    });
    c.create_schedule(pb::CreateScheduleRequest { schedule: Some(s) })
        .await
        .unwrap();
    let before = get_schedule(&app, "wide").await.unwrap();
    let mut b = Browser::new(&app);
    let edit = b.get("/schedules/wide/edit").await;
    assert_eq!(edit.status, 200);
    for shown in [
        "name=\"fanout\" inputmode=\"numeric\" value=\"3\"",
        "value=\"tenant-1\"",
        "gpu=a100",
        "value=\"soft\" selected",
    ] {
        assert!(edit.body.contains(shown), "{shown}: {}", edit.body);
    }
    let t = before.task.clone().unwrap();
    let csrf = edit.csrf();
    let priority = t.priority.to_string();
    let attempts = t.retry.as_ref().unwrap().max_attempts.to_string();
    let payload = String::from_utf8(t.payload.clone()).unwrap();
    let form = [
        ("csrf", csrf.as_str()),
        ("schedule_id", "wide"),
        ("kind", "cron"),
        ("cron", "0 3 * * *"),
        ("timezone", "Europe/Berlin"),
        ("overlap", "skip"),
        ("misfire", "fire_once"),
        ("queue", "gpu"),
        ("metadata", "note=<script>x</script>"),
        ("payload", payload.as_str()),
        ("priority", priority.as_str()),
        ("max_attempts", attempts.as_str()),
        ("fanout", "5"),
        ("concurrency_key", "tenant-1"),
        ("target_labels", "gpu=a100"),
        ("sticky", "soft"),
        ("key", ""),
    ];
    let saved = b.post("/schedules/wide/edit", &form).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let after = get_schedule(&app, "wide").await.unwrap().task.unwrap();
    assert_eq!(
        after.fanout,
        Some(pb::Fanout {
            copies: 5,
            distinct_workers: true
        }),
        "copies changed, distinct_workers kept"
    );
    assert_eq!(after.sticky, t.sticky, "the SOFT timeout kept");
    assert_eq!(after.target, t.target);
    assert_eq!(after.concurrency_key, "tenant-1");
    let page = b.get("/schedules/wide").await;
    assert!(page.body.contains("Copies per fire"), "{}", page.body);
    app.shutdown().await;
}

/// Leases `queue`'s next task and completes it.
async fn succeed_one(app: &TestApp, queue: &str) {
    let mut c = app.broker().await;
    let t = lease_one(&mut c, queue).await;
    c.complete(pb::CompleteRequest {
        task_id: t.task_id,
        lease_token: t.lease_token,
        result: vec![],
        lease_next: None,
    })
    .await
    .expect("complete");
}

/// The `data-` count of one chart on a page.
fn chart_count(html: &str, id: &str, what: &str) -> u64 {
    let at = html.find(&format!("id=\"{id}\"")).expect("the chart");
    let rest = &html[at..];
    let key = format!("data-{what}=\"");
    let v = &rest[rest.find(&key).unwrap() + key.len()..];
    v[..v.find('"').unwrap()].parse().unwrap()
}

async fn a_queues_charts_count_its_finished_attempts(backend: Backend) {
    let Some(app) = console_on(backend).await else {
        return;
    };
    let mut c = app.broker().await;
    submit(
        &mut c,
        vec![spec("ch"), spec("ch"), spec("ch"), spec("other")],
    )
    .await;
    succeed_one(&app, "ch").await;
    succeed_one(&app, "ch").await;
    kill_one(&app, "ch", "boom").await;
    succeed_one(&app, "other").await;
    let mut b = Browser::new(&app);
    let page = b.get("/queues/ch").await;
    assert_eq!(page.status, 200, "{}", page.body);
    for id in ["chart-hour", "chart-day"] {
        assert_eq!(chart_count(&page.body, id, "succeeded"), 2, "{id}");
        assert_eq!(chart_count(&page.body, id, "failed"), 1, "{id}");
    }
    assert_eq!(
        page.body.matches("<rect class=\"ok\"").count(),
        2,
        "one bar per chart"
    );
    assert!(page.body.contains("2 succeeded, 1 failed"));
    // Two hours later the hour is empty; the day still counts them.
    app.advance(std::time::Duration::from_secs(2 * 3600));
    let page = b.get("/queues/ch").await;
    assert_eq!(chart_count(&page.body, "chart-hour", "succeeded"), 0);
    assert_eq!(chart_count(&page.body, "chart-day", "succeeded"), 2);
    assert_eq!(chart_count(&page.body, "chart-day", "failed"), 1);
    // A day later, neither.
    app.advance(std::time::Duration::from_secs(24 * 3600));
    let page = b.get("/queues/ch").await;
    assert_eq!(chart_count(&page.body, "chart-day", "succeeded"), 0);
    assert_eq!(b.get("/queues/no%20such").await.status, 400);
    app.shutdown().await;
}

all_backends!(
    schedules_are_created_and_edited_from_the_form,
    schedule_form_edits_keep_the_routing_the_form_does_not_show,
    a_queues_charts_count_its_finished_attempts,
    queues_are_paused_resumed_and_edited_from_the_console,
    workers_show_their_labels_and_leases,
    a_waiting_task_says_why_it_is_not_running,
    a_task_page_shows_its_event_history,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queues_page_shows_buckets_and_lifts_a_cooldown() {
    let app = console_app(Vec::new()).await;
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    admin
        .update_bucket(pb::UpdateBucketRequest {
            name: "partner".into(),
            config: Some(pb::BucketConfig {
                rate_limit: Some(pb::RateLimit {
                    per_second: 20.0,
                    burst: 20,
                }),
                max_concurrent: 7,
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["rate_limit".into(), "max_concurrent".into()],
            }),
        })
        .await
        .expect("bucket");
    submit(
        &mut c,
        vec![pb::TaskSpec {
            bucket: "partner".into(),
            concurrency_key: "acme".into(),
            ..spec("calls")
        }],
    )
    .await;
    let t = lease_one(&mut c, "calls").await;
    c.fail(pb::FailRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
        cooldown: Some(pb::Cooldown {
            scope: pb::CooldownScope::ConcurrencyKey as i32,
            duration: secs(600),
        }),
        ..Default::default()
    })
    .await
    .expect("fail with cooldown");
    let mut b = Browser::new(&app);
    let page = b.get("/queues").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("id=\"bucket-use\""), "{}", page.body);
    assert!(page.body.contains(">partner<"), "{}", page.body);
    assert!(page.body.contains("20/s (burst 20)"), "{}", page.body);
    assert!(page.body.contains(">acme<"), "{}", page.body);
    assert!(page.body.contains(&t.task_id), "{}", page.body);
    let token = page.csrf();
    let lift = [
        ("csrf", token.as_str()),
        ("queue", "calls"),
        ("concurrency_key", "acme"),
        ("bucket", ""),
    ];
    assert_eq!(b.post("/cooldowns/lift", &lift[1..]).await.status, 403);
    let ok = b.post("/cooldowns/lift", &lift).await;
    assert_eq!(ok.status, 303, "{}", ok.body);
    assert_eq!(ok.header("location"), Some("/queues?done=lifted#cooldowns"));
    let cds = admin
        .list_cooldowns(pb::ListCooldownsRequest::default())
        .await
        .expect("list")
        .into_inner()
        .cooldowns;
    assert!(cds.is_empty());
    let page = b.get("/queues?done=lifted").await;
    assert!(page.body.contains("No cooldown is live."), "{}", page.body);
    app.shutdown().await;
}
