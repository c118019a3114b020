//! Read-only pages: the overview, payloads, checkpoints, the task list and a task's event history.

use super::*;

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

all_backends!(a_task_page_shows_its_event_history);
