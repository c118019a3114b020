//! Settles and leases run several at once in one broker (`mysql_jobs_in_flight`
//! on MySQL; one at a time elsewhere): many long-polls and completers on one
//! queue, with repeated and stale completions among them. Every task is leased
//! once, every acknowledged completion is kept, and a reader that follows the
//! event log while they run misses no event.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use taskbroker_client::pb;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use taskbroker_server::domain::event::EventKind;
use taskbroker_server::store::EventRecord;
use tonic::transport::Channel;

const TASKS: usize = 600;
const WORKERS: usize = 12;

#[derive(Default)]
struct Seen {
    /// How many times each task was handed out.
    leased: Mutex<HashMap<String, usize>>,
    /// The tasks whose completion was acknowledged.
    acked: Mutex<HashSet<String>>,
    completed: AtomicUsize,
}

async fn complete(
    c: &mut BrokerServiceClient<Channel>,
    t: &pb::LeasedTask,
    token: &str,
) -> Result<(), tonic::Status> {
    c.complete(pb::CompleteRequest {
        task_id: t.task_id.clone(),
        lease_token: token.to_string(),
        result: t.task_id.clone().into_bytes(),
        lease_next: None,
    })
    .await
    .map(|_| ())
}

/// Settles one worker's batch: by CompleteMany, or each task by Complete, some
/// twice at once and after a stale token.
async fn settle(
    c: &mut BrokerServiceClient<Channel>,
    w: usize,
    tasks: &[pb::LeasedTask],
    seen: &Seen,
) {
    if w.is_multiple_of(2) {
        let completions = tasks
            .iter()
            .map(|t| pb::CompleteRequest {
                task_id: t.task_id.clone(),
                lease_token: t.lease_token.clone(),
                result: t.task_id.clone().into_bytes(),
                lease_next: None,
            })
            .collect();
        let results = c
            .complete_many(pb::CompleteManyRequest {
                completions,
                lease_next: None,
            })
            .await
            .unwrap()
            .into_inner()
            .results;
        for r in results {
            assert_eq!(r.outcome(), pb::CompleteOutcome::Completed, "{}", r.task_id);
            seen.acked.lock().unwrap().insert(r.task_id);
        }
        return;
    }
    for t in tasks {
        let stale = format!("{}-stale", t.lease_token);
        let e = complete(c, t, &stale).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Aborted, "a stale token: {e:?}");
        let mut other = c.clone();
        let (a, b) = tokio::join!(
            complete(c, t, &t.lease_token),
            complete(&mut other, t, &t.lease_token)
        );
        // The same token twice: one applies, the other finds it settled by it.
        assert!(a.is_ok() && b.is_ok(), "{}: {a:?} {b:?}", t.task_id);
        seen.acked.lock().unwrap().insert(t.task_id.clone());
    }
}

async fn work(addr: String, w: usize, seen: Arc<Seen>) {
    let mut c = BrokerServiceClient::connect(addr).await.unwrap();
    while seen.completed.load(Ordering::SeqCst) < TASKS {
        let tasks = c
            .lease(pb::LeaseRequest {
                labels: Default::default(),
                worker_id: format!("w{w}"),
                queues: vec!["inflight".into()],
                max_tasks: 1 + (w as u32 % 5) * 4,
                lease_duration: secs(600),
                wait: dur(Duration::from_millis(100)),
            })
            .await
            .unwrap()
            .into_inner()
            .tasks;
        for t in &tasks {
            *seen
                .leased
                .lock()
                .unwrap()
                .entry(t.task_id.clone())
                .or_default() += 1;
        }
        settle(&mut c, w, &tasks, &seen).await;
        seen.completed.fetch_add(tasks.len(), Ordering::SeqCst);
    }
}

/// Reads the event log from its head while `done` is unset, then to its end.
async fn follow(app: &TestApp, start: i64, done: &AtomicBool) -> Vec<EventRecord> {
    let store = app.service().store().clone();
    let (mut out, mut after) = (Vec::new(), start);
    loop {
        let finished = done.load(Ordering::SeqCst);
        let page = store.event_read(after, 500).await.unwrap();
        if let Some(last) = page.last() {
            after = last.event_id;
        }
        let empty = page.is_empty();
        out.extend(page);
        if finished && empty {
            return out;
        }
        if empty {
            tokio::task::yield_now().await;
        }
    }
}

async fn in_flight_jobs_lease_each_task_once_and_keep_every_completion(b: Backend) {
    let opts = Options {
        settings: taskbroker_server::service::Settings {
            mysql_jobs_in_flight: 4,
            ..Default::default()
        },
        db_max_connections: Some(16),
        ..Default::default()
    };
    let Some(app) = spawn_app_with(b, opts).await else {
        return;
    };
    let store = app.service().store().clone();
    let start = store.event_head().await.unwrap();
    let mut c = app.broker().await;
    let mut ids = Vec::new();
    for _ in 0..TASKS / 100 {
        ids.extend(submit(&mut c, (0..100).map(|_| spec("inflight")).collect()).await);
    }
    let seen = Arc::new(Seen::default());
    let done = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| tokio::spawn(work(app.url(), w, seen.clone())))
        .collect();
    let followed = {
        // The first worker that fails ends the wait (the others would wait
        // for its tasks).
        let all = futures::future::try_join_all(workers);
        let reader = follow(&app, start, &done);
        tokio::pin!(reader);
        // Bounded: a lost task fails the test rather than hanging the suite.
        let finished = tokio::time::timeout(Duration::from_secs(300), all);
        tokio::select! {
            r = finished => {
                if let Err(e) = r.expect("workers finished within 300 s") {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
            _ = &mut reader => unreachable!("the reader ends only after the workers"),
        }
        done.store(true, Ordering::SeqCst);
        reader.await
    };

    let leased = seen.leased.lock().unwrap().clone();
    assert_eq!(leased.len(), TASKS, "every task was leased");
    let twice: Vec<_> = leased.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "tasks leased more than once: {twice:?}");
    assert_eq!(
        seen.acked.lock().unwrap().len(),
        TASKS,
        "every completion acknowledged"
    );
    let mut admin = app.admin().await;
    for id in &ids {
        let t = get(&mut admin, id).await;
        assert_eq!(state(&t), pb::TaskState::Succeeded, "{id}");
        assert_eq!(t.result, id.as_bytes(), "{id}: the acknowledged result");
    }

    // The log after the run, read whole: the follower saw every event of it.
    let mut whole = Vec::new();
    let mut after = start;
    loop {
        let page = store.event_read(after, 500).await.unwrap();
        let Some(last) = page.last() else { break };
        after = last.event_id;
        whole.extend(page);
    }
    let ids_of = |evs: &[EventRecord]| evs.iter().map(|e| e.event_id).collect::<Vec<_>>();
    assert_eq!(
        ids_of(&followed),
        ids_of(&whole),
        "a reader missed no event"
    );
    assert!(ids_of(&whole).windows(2).all(|p| p[0] < p[1]));
    for kind in [EventKind::Leased, EventKind::Succeeded] {
        let mut per_task: HashMap<&str, usize> = HashMap::new();
        for e in whole.iter().filter(|e| e.kind == kind) {
            *per_task.entry(e.task_id.as_str()).or_default() += 1;
        }
        assert_eq!(per_task.len(), TASKS, "{kind:?}");
        assert!(per_task.values().all(|&n| n == 1), "{kind:?} once per task");
    }
}

all_backends!(in_flight_jobs_lease_each_task_once_and_keep_every_completion);
