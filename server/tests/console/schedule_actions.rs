//! Schedules: pause, trigger, resume and delete after confirmation.

use super::*;

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
