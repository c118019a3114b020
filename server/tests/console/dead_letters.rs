//! Dead letters: grouped by error, requeued or cancelled by group or one by one.

use super::*;

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
