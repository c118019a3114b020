//! AdminService: listing with filters and paging, updates, stats.

mod common;

use std::time::Duration;

use common::*;
use taskbroker_client::pb;
use tonic::Code;

async fn list_filters_and_pages_newest_first(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let mut ids = submit(&mut c, (0..25).map(|_| spec("list-a")).collect()).await;
    submit(&mut c, (0..5).map(|_| spec("list-b")).collect()).await;
    let keyed = submit_one(
        &mut c,
        pb::TaskSpec {
            key: "k-1".into(),
            run_at: ts(app.clock.now_utc() + chrono::Duration::hours(1)),
            ..spec("list-a")
        },
    )
    .await;
    ids.push(keyed.clone());

    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = admin
            .list_tasks(pb::ListTasksRequest {
                queue: "list-a".into(),
                page_size: 10,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        pages += 1;
        seen.extend(page.tasks.into_iter().map(|t| t.id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(pages, 3);
    ids.reverse();
    assert_eq!(seen, ids, "every task once, newest first");

    let scheduled = admin
        .list_tasks(pb::ListTasksRequest {
            states: vec![pb::TaskState::Scheduled as i32],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert_eq!(scheduled.len(), 1);
    assert_eq!(scheduled[0].id, keyed);
    let by_key = admin
        .list_tasks(pb::ListTasksRequest {
            key: "k-1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert_eq!(by_key.len(), 1);

    let mut req = lease_req("list-b", 2);
    req.worker_id = "worker-7".into();
    c.lease(req).await.unwrap();
    let by_worker = admin
        .list_tasks(pb::ListTasksRequest {
            worker_id: "worker-7".into(),
            states: vec![pb::TaskState::Leased as i32],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert_eq!(by_worker.len(), 2);
    let none = admin
        .list_tasks(pb::ListTasksRequest {
            created_after: ts(app.clock.now_utc() + chrono::Duration::seconds(1)),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert!(none.is_empty());
}

async fn update_changes_waiting_tasks_but_not_leased_ones(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let first = submit_one(&mut c, spec("upd")).await;
    let second = submit_one(&mut c, spec("upd")).await;
    let mask = |paths: &[&str]| {
        Some(prost_types::FieldMask {
            paths: paths.iter().map(|p| p.to_string()).collect(),
        })
    };
    // Raising the second task's priority makes it lease first.
    let t = admin
        .update_task(pb::UpdateTaskRequest {
            task_id: second.clone(),
            priority: 10,
            max_attempts: 7,
            update_mask: mask(&["priority", "max_attempts"]),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .task
        .unwrap();
    assert_eq!((t.priority, t.max_attempts), (10, 7));
    // Moving the first one into the future makes it SCHEDULED.
    let later = app.clock.now_utc() + chrono::Duration::hours(2);
    let t = admin
        .update_task(pb::UpdateTaskRequest {
            task_id: first.clone(),
            run_at: ts(later),
            update_mask: mask(&["run_at"]),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .task
        .unwrap();
    assert_eq!(state(&t), pb::TaskState::Scheduled);
    let leased = lease(&mut c, "upd", 5).await;
    assert_eq!(leased.len(), 1);
    assert_eq!(leased[0].task_id, second);
    assert_eq!(leased[0].max_attempts, 7);

    let err = admin
        .update_task(pb::UpdateTaskRequest {
            task_id: second,
            priority: 1,
            update_mask: mask(&["priority"]),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let missing = admin
        .update_task(pb::UpdateTaskRequest {
            task_id: "missing".into(),
            priority: 1,
            update_mask: mask(&["priority"]),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
}

async fn queue_stats_count_states_and_recent_outcomes(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    submit(&mut c, (0..5).map(|_| spec("st")).collect()).await;
    submit_one(
        &mut c,
        pb::TaskSpec {
            run_at: ts(app.clock.now_utc() + chrono::Duration::hours(1)),
            ..spec("st")
        },
    )
    .await;
    let leased = lease(&mut c, "st", 3).await;
    c.complete(pb::CompleteRequest {
        task_id: leased[0].task_id.clone(),
        lease_token: leased[0].lease_token.clone(),
        result: vec![],
        lease_next: None,
    })
    .await
    .unwrap();
    c.fail(pb::FailRequest {
        task_id: leased[1].task_id.clone(),
        lease_token: leased[1].lease_token.clone(),
        non_retryable: true,
        ..Default::default()
    })
    .await
    .unwrap();
    app.advance(Duration::from_secs(5));
    let stats = admin
        .get_queue_stats(pb::GetQueueStatsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .queues;
    assert_eq!(stats.len(), 1);
    let s = &stats[0];
    assert_eq!(s.queue, "st");
    assert_eq!(
        (
            s.scheduled,
            s.ready,
            s.leased,
            s.succeeded,
            s.dead,
            s.cancelled
        ),
        (1, 2, 1, 1, 1, 0)
    );
    assert_eq!((s.completed_last_minute, s.failed_last_minute), (1, 1));
    assert_eq!(s.oldest_ready_age.as_ref().unwrap().seconds, 5);
}

/// A task that spent its 3 attempts, requeued: READY with a budget of 6 attempts
/// (the 3 made and 3 more), no lease, and the retry policy still 3.
async fn requeue_gives_a_fresh_budget_and_no_lease(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
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
    let dead = get(&mut admin, &id).await;
    assert_eq!(state(&dead), pb::TaskState::Dead);
    assert_eq!((dead.attempt, dead.max_attempts), (3, 3));

    let requeued = admin
        .requeue_task(pb::RequeueTaskRequest {
            task_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .task
        .unwrap();
    for t in [requeued, get(&mut admin, &id).await] {
        assert_eq!(state(&t), pb::TaskState::Ready);
        assert_eq!((t.attempt, t.max_attempts), (3, 6), "attempt 3 of 6");
        assert_eq!(t.retry.as_ref().unwrap().max_attempts, 3);
        assert_eq!(t.lease_expires_at, None);
        assert!(!t.cancel_requested);
        assert!(t.finished_at.is_none());
    }
    let again = lease_one(&mut c, "rq").await;
    assert_eq!((again.attempt, again.max_attempts), (4, 6));
    let leased = get(&mut admin, &id).await;
    assert_eq!((leased.attempt, leased.max_attempts), (4, 6));
    assert_eq!(leased.leased_by, "w1");
    assert!(leased.lease_expires_at.is_some());
}

/// An operator moves a waiting task to another worker: the old one no longer gets
/// it, the new one does, and its events say what changed.
async fn update_moves_a_waiting_task_to_another_worker(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let mut s = spec("retarget");
    s.target = Some(pb::Target {
        worker_id: "w1".into(),
        ..Default::default()
    });
    let id = submit_one(&mut c, s).await;
    let t = admin
        .update_task(pb::UpdateTaskRequest {
            task_id: id.clone(),
            target: Some(pb::Target {
                worker_id: "w2".into(),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["target".into()],
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .task
        .unwrap();
    assert_eq!(t.target.map(|t| t.worker_id).as_deref(), Some("w2"));
    // `lease` asks as w1.
    assert!(lease(&mut c, "retarget", 5).await.is_empty());
    let leased = c
        .lease(pb::LeaseRequest {
            worker_id: "w2".into(),
            ..lease_req("retarget", 5)
        })
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert_eq!(leased.len(), 1);
    assert_eq!(leased[0].task_id, id);
    let events = admin
        .list_task_events(pb::ListTaskEventsRequest {
            task_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .events;
    let updated = events
        .iter()
        .find(|e| e.kind() == pb::TaskEventKind::Updated)
        .expect("an updated event");
    assert_eq!(updated.detail, "target worker w1 -> worker w2");
    // A leased task keeps its target.
    let err = admin
        .update_task(pb::UpdateTaskRequest {
            task_id: id,
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["target".into()],
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
}

all_backends!(
    requeue_gives_a_fresh_budget_and_no_lease,
    list_filters_and_pages_newest_first,
    update_changes_waiting_tasks_but_not_leased_ones,
    update_moves_a_waiting_task_to_another_worker,
    queue_stats_count_states_and_recent_outcomes,
);
