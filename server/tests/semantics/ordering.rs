//! Lease order across queues, and a Lease reply that stays within the reply budget.

use super::*;

// 1. Ordering: priority DESC, deadline ASC (none last), run_at ASC, submission order.
async fn lease_order_is_priority_then_deadline_then_run_at_then_submission(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    let now = app.clock.now_utc();
    let t = |p: &str, prio: i32, deadline_h: Option<i64>, run_at_ago_s: i64| pb::TaskSpec {
        payload: p.as_bytes().to_vec(),
        priority: prio,
        deadline: deadline_h.and_then(|h| ts(now + chrono::Duration::hours(h))),
        run_at: ts(now - chrono::Duration::seconds(run_at_ago_s)),
        ..spec("order")
    };
    submit(
        &mut c,
        vec![
            t("low", -1, None, 0),
            t("plain-late", 0, None, 0),
            t("plain-early", 0, None, 10),
            t("plain-early-second", 0, None, 10),
            t("p5-no-deadline", 5, None, 0),
            t("p5-deadline-2h", 5, Some(2), 0),
            t("p5-deadline-1h", 5, Some(1), 0),
            pb::TaskSpec {
                payload: b"future".to_vec(),
                priority: 100,
                run_at: ts(now + chrono::Duration::hours(1)),
                ..spec("order")
            },
        ],
    )
    .await;
    let got: Vec<String> = lease(&mut c, "order", 100)
        .await
        .into_iter()
        .map(|t| String::from_utf8(t.payload).unwrap())
        .collect();
    assert_eq!(
        got,
        [
            "p5-deadline-1h",
            "p5-deadline-2h",
            "p5-no-deadline",
            "plain-early",
            "plain-early-second",
            "plain-late",
            "low"
        ]
    );
    // The future task becomes leasable once its run_at passes.
    assert!(lease(&mut c, "order", 10).await.is_empty());
    app.advance(Duration::from_secs(3601));
    let later = lease_one(&mut c, "order").await;
    assert_eq!(later.payload, b"future");
}

async fn a_lease_over_several_queues_takes_the_best_of_all(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    let t = |q: &str, p: &str, prio: i32| pb::TaskSpec {
        payload: p.as_bytes().to_vec(),
        priority: prio,
        ..spec(q)
    };
    submit(
        &mut c,
        vec![
            t("qa", "a1", 1),
            t("qb", "b9", 9),
            t("qa", "a5", 5),
            t("qc", "c7", 7),
            t("qb", "b0", 0),
        ],
    )
    .await;
    let mut req = lease_req("qa", 3);
    req.queues = vec!["qa".into(), "qb".into()];
    let got: Vec<String> = c
        .lease(req.clone())
        .await
        .unwrap()
        .into_inner()
        .tasks
        .into_iter()
        .map(|t| String::from_utf8(t.payload).unwrap())
        .collect();
    assert_eq!(got, ["b9", "a5", "a1"], "qc is not asked for");
    let rest: Vec<_> = c.lease(req).await.unwrap().into_inner().tasks;
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].payload, b"b0");
}

// 2b. A Lease reply stops at the reply budget (4 MiB by default, the clients'
// receive limit), so every task it hands out can be decoded; the rest wait.
async fn a_lease_reply_never_outgrows_what_a_client_can_decode(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    for _ in 0..6 {
        submit_one(
            &mut c,
            pb::TaskSpec {
                payload: vec![1; 1 << 20],
                ..spec("heavy")
            },
        )
        .await;
    }
    // A default client: 4 MiB receive limit.
    let first = c.lease(lease_req("heavy", 10)).await.expect("decodable");
    let first = first.into_inner().tasks;
    assert_eq!(
        first.len(),
        3,
        "3 MiB and their overhead fit, a fourth would not"
    );
    let second = c
        .lease(lease_req("heavy", 10))
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert_eq!(second.len(), 3);
}

all_backends!(
    a_lease_reply_never_outgrows_what_a_client_can_decode,
    lease_order_is_priority_then_deadline_then_run_at_then_submission,
    a_lease_over_several_queues_takes_the_best_of_all
);
