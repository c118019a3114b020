//! The schedule form: creating and editing schedules, keeping what the form does not show.

use super::*;

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

all_backends!(
    schedules_are_created_and_edited_from_the_form,
    schedule_form_edits_keep_the_routing_the_form_does_not_show
);
