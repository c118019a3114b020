//! Queues, workers, Explain, charts and buckets, on every store.

use super::*;

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

all_backends!(
    a_queues_charts_count_its_finished_attempts,
    queues_are_paused_resumed_and_edited_from_the_console,
    workers_show_their_labels_and_leases,
    a_waiting_task_says_why_it_is_not_running
);
