//! Task actions: the CSRF guard, then requeue, change and cancel after confirmation.

use super::*;

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
