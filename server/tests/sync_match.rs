//! Sync match end to end: a Submit hands its tasks to the long-polls
//! waiting for their queue, in its own commit; a task that would lease first
//! keeps its place; with two replicas on one database every task goes to one
//! worker once. Bounds below are liveness guards, not speed checks.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use taskbroker_client::pb;

const GUARD: Duration = Duration::from_secs(20);

/// Sync match on, on Postgres too (off there by default).
fn sync_on() -> taskbroker_server::service::Settings {
    taskbroker_server::service::Settings {
        sync_match_postgres: true,
        ..Default::default()
    }
}

fn waiting(queue: &str, worker: &str, max_tasks: u32) -> pb::LeaseRequest {
    pb::LeaseRequest {
        worker_id: worker.into(),
        wait: secs(60),
        ..lease_req(queue, max_tasks)
    }
}

async fn a_waiting_worker_is_handed_the_submitted_task(b: Backend) {
    let Some(app) = spawn_app_with(
        b,
        Options {
            settings: sync_on(),
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let mut waiter = app.broker().await;
    let poll = tokio::spawn(async move {
        waiter
            .lease(waiting("sm", "w1", 1))
            .await
            .unwrap()
            .into_inner()
            .tasks
    });
    app.until_waiting(1).await;
    let mut c = app.broker().await;
    let id = submit_one(&mut c, spec("sm")).await;
    let got = tokio::time::timeout(GUARD, poll).await.unwrap().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].task_id, id);
    assert_eq!(got[0].attempt, 1);
    assert_eq!(app.service().sync_matched(), 1, "handed over by the Submit");
    // Stored as leased to that worker since its insert.
    let t = get(&mut app.admin().await, &id).await;
    assert_eq!(state(&t), pb::TaskState::Leased);
    assert_eq!(t.created_at, t.updated_at);
    // Its lease settles like any other.
    c.complete(pb::CompleteRequest {
        task_id: id.clone(),
        lease_token: got[0].lease_token.clone(),
        ..Default::default()
    })
    .await
    .expect("complete");
    let t = get(&mut app.admin().await, &id).await;
    assert_eq!(state(&t), pb::TaskState::Succeeded);
}

async fn a_batch_of_submits_is_shared_among_the_waiting_workers(b: Backend) {
    let Some(app) = spawn_app_with(
        b,
        Options {
            settings: sync_on(),
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let mut polls = Vec::new();
    for i in 0..3 {
        let mut waiter = app.broker().await;
        polls.push(tokio::spawn(async move {
            waiter
                .lease(waiting("share", &format!("w{i}"), 2))
                .await
                .unwrap()
                .into_inner()
                .tasks
        }));
        // One at a time, so the order in which they wait is known.
        app.until_waiting(i + 1).await;
    }
    let mut c = app.broker().await;
    let ids = submit(&mut c, (0..5).map(|_| spec("share")).collect()).await;
    let mut got = Vec::new();
    for p in polls {
        got.push(tokio::time::timeout(GUARD, p).await.unwrap().unwrap());
    }
    // One slot of each waiter before a second of any, in submission order.
    let ids_of = |ts: &[pb::LeasedTask]| ts.iter().map(|t| t.task_id.clone()).collect::<Vec<_>>();
    assert_eq!(ids_of(&got[0]), [ids[0].clone(), ids[3].clone()]);
    assert_eq!(ids_of(&got[1]), [ids[1].clone(), ids[4].clone()]);
    assert_eq!(ids_of(&got[2]), [ids[2].clone()]);
    assert_eq!(app.service().sync_matched(), 5);
}

async fn a_due_task_that_leases_first_is_not_overtaken_by_a_new_one(b: Backend) {
    let Some(app) = spawn_app_with(
        b,
        Options {
            settings: sync_on(),
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let mut c = app.broker().await;
    // Scheduled one second ahead (on the manual clock), priority 5.
    let at = app.service().clock().now() + chrono::Duration::seconds(1);
    let first = submit_one(
        &mut c,
        pb::TaskSpec {
            run_at: ts(at),
            priority: 5,
            ..spec("order")
        },
    )
    .await;
    let mut waiter = app.broker().await;
    let poll = tokio::spawn(async move {
        waiter
            .lease(waiting("order", "w1", 1))
            .await
            .unwrap()
            .into_inner()
            .tasks
    });
    app.until_waiting(1).await;
    // The scheduled task is due now; a new task of lower priority arrives while
    // the worker waits. The worker must get the due task, not the new one.
    app.advance(Duration::from_secs(1));
    let later = submit_one(&mut c, spec("order")).await;
    let got = tokio::time::timeout(GUARD, poll).await.unwrap().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].task_id, first);
    assert_eq!(app.service().sync_matched(), 0);
    // The new one waits its turn, READY.
    let next = lease_one(&mut c, "order").await;
    assert_eq!(next.task_id, later);
}

async fn a_new_task_that_leases_first_is_handed_over_past_a_due_one(b: Backend) {
    let Some(app) = spawn_app_with(
        b,
        Options {
            settings: sync_on(),
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let mut c = app.broker().await;
    let at = app.service().clock().now() + chrono::Duration::seconds(1);
    submit_one(
        &mut c,
        pb::TaskSpec {
            run_at: ts(at),
            priority: 5,
            ..spec("past")
        },
    )
    .await;
    let mut waiter = app.broker().await;
    let poll = tokio::spawn(async move {
        waiter
            .lease(waiting("past", "w1", 1))
            .await
            .unwrap()
            .into_inner()
            .tasks
    });
    app.until_waiting(1).await;
    app.advance(Duration::from_secs(1));
    let urgent = submit_one(
        &mut c,
        pb::TaskSpec {
            priority: 9,
            ..spec("past")
        },
    )
    .await;
    let got = tokio::time::timeout(GUARD, poll).await.unwrap().unwrap();
    assert_eq!(got[0].task_id, urgent);
    assert_eq!(app.service().sync_matched(), 1);
}

async fn a_targeted_task_is_left_to_the_lease_statement(b: Backend) {
    let Some(app) = spawn_app_with(
        b,
        Options {
            settings: sync_on(),
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let mut waiter = app.broker().await;
    let poll = tokio::spawn(async move {
        waiter
            .lease(waiting("tg", "w1", 1))
            .await
            .unwrap()
            .into_inner()
            .tasks
    });
    app.until_waiting(1).await;
    let mut c = app.broker().await;
    let id = submit_one(
        &mut c,
        pb::TaskSpec {
            target: Some(pb::Target {
                worker_id: "w1".into(),
                ..Default::default()
            }),
            ..spec("tg")
        },
    )
    .await;
    let got = tokio::time::timeout(GUARD, poll).await.unwrap().unwrap();
    assert_eq!(
        got[0].task_id, id,
        "woken, and leased by the lease statement"
    );
    assert_eq!(app.service().sync_matched(), 0);
}

all_backends!(
    a_waiting_worker_is_handed_the_submitted_task,
    a_batch_of_submits_is_shared_among_the_waiting_workers,
    a_due_task_that_leases_first_is_not_overtaken_by_a_new_one,
    a_new_task_that_leases_first_is_handed_over_past_a_due_one,
    a_targeted_task_is_left_to_the_lease_statement,
);

/// Two replicas on one Postgres database, workers long-polling on both and
/// producers submitting on both: every task reaches exactly one worker, once,
/// at its first attempt, and both replicas sync-match.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_hand_every_task_to_one_worker_once() {
    let real = || Options {
        manual_clock: false,
        settings: sync_on(),
        ..Options::default()
    };
    let Some(a) = spawn_app_with(Backend::Postgres, real()).await else {
        return;
    };
    let b = spawn_on(a.db.clone(), real()).await;
    const TASKS: usize = 1500;
    let received: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let stop = tokio_util::sync::CancellationToken::new();
    let mut workers = Vec::new();
    for (r, app) in [&a, &b].into_iter().enumerate() {
        for i in 0..6 {
            let mut c = app.broker().await;
            let (received, stop) = (received.clone(), stop.clone());
            workers.push(tokio::spawn(async move {
                let req = pb::LeaseRequest {
                    wait: dur(Duration::from_millis(500)),
                    ..waiting("two", &format!("r{r}-w{i}"), 1 + (i as u32 % 3))
                };
                while !stop.is_cancelled() {
                    let tasks = c
                        .lease(req.clone())
                        .await
                        .expect("lease")
                        .into_inner()
                        .tasks;
                    for t in tasks {
                        *received
                            .lock()
                            .unwrap()
                            .entry(t.task_id.clone())
                            .or_default() += 1;
                        c.complete(pb::CompleteRequest {
                            task_id: t.task_id,
                            lease_token: t.lease_token,
                            ..Default::default()
                        })
                        .await
                        .expect("every lease is live and completes");
                    }
                }
            }));
        }
    }
    let mut producers = Vec::new();
    for (r, app) in [&a, &b].into_iter().enumerate() {
        for p in 0..2 {
            let mut c = app.broker().await;
            let svc = app.service();
            producers.push(tokio::spawn(async move {
                let mut ids = Vec::new();
                let mut n = 0;
                while n < TASKS / 4 {
                    // Mostly when a long-poll waits on this replica (to be handed
                    // the tasks), sometimes while none does.
                    if n % 7 != 0 {
                        while svc.dispatcher().waiters() == 0 {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                    let k = (1 + (n + p + r) % 4).min(TASKS / 4 - n);
                    ids.extend(submit(&mut c, (0..k).map(|_| spec("two")).collect()).await);
                    n += k;
                }
                ids
            }));
        }
    }
    let mut submitted = Vec::new();
    for p in producers {
        submitted.extend(p.await.unwrap());
    }
    assert_eq!(submitted.len(), TASKS);
    let give_up = tokio::time::Instant::now() + Duration::from_secs(120);
    while received.lock().unwrap().len() < TASKS {
        if tokio::time::Instant::now() >= give_up {
            let missing: Vec<&String> = submitted
                .iter()
                .filter(|id| !received.lock().unwrap().contains_key(*id))
                .collect();
            let mut admin = a.admin().await;
            for id in missing.iter().take(5) {
                eprintln!("missing {id}: {:?}", get(&mut admin, id).await);
            }
            panic!(
                "every task is leased: {} of {TASKS} ({} missing; sync-matched {} and {})",
                received.lock().unwrap().len(),
                missing.len(),
                a.service().sync_matched(),
                b.service().sync_matched()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    for w in workers {
        w.await.unwrap();
    }
    let received = received.lock().unwrap().clone();
    assert_eq!(received.len(), TASKS);
    assert!(received.values().all(|&n| n == 1), "no task leased twice");
    for id in &submitted {
        assert_eq!(received.get(id), Some(&1));
    }
    let (sa, sb) = (a.service().sync_matched(), b.service().sync_matched());
    assert!(sa > 0 && sb > 0, "both replicas sync-matched ({sa}, {sb})");
    // Stored: every task succeeded at its first attempt.
    let mut admin = a.admin().await;
    for id in submitted.iter().step_by(25) {
        let t = get(&mut admin, id).await;
        assert_eq!(state(&t), pb::TaskState::Succeeded);
        assert_eq!(t.attempt, 1);
    }
}
