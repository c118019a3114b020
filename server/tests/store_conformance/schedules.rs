//! Conformance cases of the schedule methods of `Store` (both databases).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use taskbroker_server::domain::schedule::{Misfire, Overlap, Spec};
use taskbroker_server::domain::{RetryPolicy, StoredState};
use taskbroker_server::store::{
    self, Fired, NewRun, NewTask, PurgeScope, ScheduleFilter, ScheduleFire, ScheduleRecord,
    ScheduleRunFilter, Store, TaskFilter, TaskTemplate,
};

use super::common::*;
use super::{open, t0};

fn secs(n: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::seconds(n)
}

pub fn schedule(id: &str, next: Option<DateTime<Utc>>) -> ScheduleRecord {
    ScheduleRecord {
        id: id.into(),
        spec: Spec::Every {
            every: Duration::from_secs(1),
            anchor: t0(),
        },
        start_time: None,
        end_time: Some(secs(3600)),
        template: TaskTemplate {
            queue: "sched".into(),
            payload: b"tick".to_vec(),
            priority: 3,
            retry: RetryPolicy::default(),
            metadata: BTreeMap::from([("k".to_string(), "v".to_string())]),
            deadline_after: Some(Duration::from_secs(30)),
            ..TaskTemplate::default()
        },
        overlap: Overlap::BufferOne,
        misfire: Misfire::CatchUp,
        catchup_window: Duration::from_secs(600),
        paused: false,
        max_runs: 7,
        next_spec_at: next,
        buffered_at: None,
        next_fire_at: next,
        last_fire_at: None,
        last_task_id: None,
        runs: 0,
        state_reason: None,
        created_by: Some("alice".into()),
        created_at: t0(),
        updated_at: t0(),
        version: 0,
    }
}

fn task_for(id: &str, n: i64) -> NewTask {
    NewTask {
        routing: Default::default(),
        id: format!("00000000-0000-7000-9000-{n:012}"),
        queue: "sched".into(),
        key: None,
        payload: b"tick".to_vec(),
        priority: 0,
        run_at: secs(n),
        deadline: None,
        retry: RetryPolicy::default(),
        metadata: BTreeMap::from([("taskbroker.schedule_id".to_string(), id.to_string())]),
        concurrency_key: None,
        checkpoint: None,
    }
}

fn fire(s: &ScheduleRecord, version: i64, times: &[i64], task_base: i64) -> ScheduleFire {
    ScheduleFire {
        schedule_id: s.id.clone(),
        version,
        runs: times
            .iter()
            .enumerate()
            .map(|(i, &t)| NewRun {
                fire_time: secs(t),
                tasks: vec![task_for(&s.id, task_base + i as i64)],
                triggered: false,
            })
            .collect(),
        cancel_task_id: None,
        next_spec_at: Some(secs(100)),
        buffered_at: None,
        next_fire_at: Some(secs(100)),
        state_reason: None,
        now: secs(times.last().copied().unwrap_or(0)),
    }
}

pub async fn schedules_insert_read_update_and_delete(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let a = schedule("a", Some(secs(1)));
    assert!(s.schedule_insert(&a).await.unwrap());
    assert!(!s.schedule_insert(&a).await.unwrap(), "ids are unique");
    let mut once = schedule("b:once", None);
    once.spec = Spec::Once { at: secs(5) };
    once.created_by = None;
    once.template.deadline_after = None;
    assert!(s.schedule_insert(&once).await.unwrap());
    let mut cron = schedule("c.cron", Some(secs(60)));
    cron.spec = Spec::Cron {
        expr: "30 2 * * *".into(),
        timezone: "Europe/Berlin".into(),
    };
    assert!(s.schedule_insert(&cron).await.unwrap());
    assert_eq!(s.schedule_get("a").await.unwrap().unwrap(), a);
    assert_eq!(s.schedule_get("b:once").await.unwrap().unwrap(), once);
    assert_eq!(s.schedule_get("c.cron").await.unwrap().unwrap(), cron);
    assert_eq!(s.schedule_get("zzz").await.unwrap(), None);

    let ids = |f: ScheduleFilter| {
        let s = s.clone();
        async move {
            let list = s.schedule_list(&f).await.unwrap();
            list.into_iter().map(|x| x.id).collect::<Vec<_>>()
        }
    };
    let all = ScheduleFilter {
        limit: 10,
        ..ScheduleFilter::default()
    };
    assert_eq!(ids(all.clone()).await, ["a", "b:once", "c.cron"]);
    let page2 = ScheduleFilter {
        after_id: Some("a".into()),
        limit: 1,
        ..all.clone()
    };
    assert_eq!(ids(page2).await, ["b:once"]);
    let alices = ScheduleFilter {
        created_by: Some("alice".into()),
        ..all.clone()
    };
    assert_eq!(ids(alices).await, ["a", "c.cron"]);

    // Updates name the version they were computed from.
    let mut changed = a.clone();
    changed.paused = true;
    changed.max_runs = 9;
    assert!(s.schedule_update(&changed, secs(2)).await.unwrap());
    let stored = s.schedule_get("a").await.unwrap().unwrap();
    assert!(stored.paused);
    assert_eq!(stored.max_runs, 9);
    assert_eq!(stored.version, 1);
    assert_eq!(stored.updated_at, secs(2));
    assert!(
        !s.schedule_update(&changed, secs(3)).await.unwrap(),
        "stale version"
    );

    assert!(s.schedule_delete("a").await.unwrap());
    assert!(!s.schedule_delete("a").await.unwrap());
    assert_eq!(s.schedule_get("a").await.unwrap(), None);
}

pub async fn schedule_due_reads_only_due_unpaused_schedules_in_order(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let mut paused = schedule("paused", Some(secs(-5)));
    paused.paused = true;
    for r in [
        schedule("later", Some(secs(10))),
        schedule("due2", Some(secs(0))),
        schedule("due1", Some(secs(-3))),
        schedule("done", None),
        paused,
    ] {
        s.schedule_insert(&r).await.unwrap();
    }
    let due = s.schedule_due(secs(0), 10).await.unwrap();
    let ids: Vec<_> = due.iter().map(|d| d.schedule.id.as_str()).collect();
    assert_eq!(ids, ["due1", "due2"]);
    assert!(due.iter().all(|d| !d.previous_unfinished));
    assert_eq!(s.schedule_due(secs(0), 1).await.unwrap().len(), 1);
}

pub async fn schedule_fire_records_each_fire_time_and_its_task_once(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let a = schedule("a", Some(secs(1)));
    s.schedule_insert(&a).await.unwrap();
    let Fired::Done(runs) = s.schedule_fire(&fire(&a, 0, &[1, 2], 1)).await.unwrap() else {
        panic!("first fire applies");
    };
    assert!(runs.iter().all(|r| r.inserted));
    // A step computed from the old version writes nothing.
    assert_eq!(
        s.schedule_fire(&fire(&a, 0, &[3], 10)).await.unwrap(),
        Fired::Stale
    );
    // The same fire time again (new version) is not inserted a second time.
    let Fired::Done(again) = s.schedule_fire(&fire(&a, 1, &[2], 20)).await.unwrap() else {
        panic!("current version applies");
    };
    assert!(!again[0].inserted);
    assert_eq!(again[0].task_id, runs[1].task_id);

    let stored = s.schedule_get("a").await.unwrap().unwrap();
    assert_eq!(stored.runs, 2);
    assert_eq!(stored.last_fire_at, Some(secs(2)));
    assert_eq!(
        stored.last_task_id.as_deref(),
        Some(runs[1].task_id.as_str())
    );
    assert_eq!(stored.next_fire_at, Some(secs(100)));
    assert_eq!(stored.version, 2);

    let t = s.task_get(&runs[0].task_id).await.unwrap().unwrap();
    assert_eq!(t.schedule_id.as_deref(), Some("a"));
    assert_eq!(t.fire_time, Some(secs(1)));
    assert_eq!(t.state, StoredState::Pending);
    let by_schedule = s
        .task_list(&TaskFilter {
            schedule_id: Some("a".into()),
            limit: 10,
            now: secs(5),
            ..TaskFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(by_schedule.len(), 2);

    // The latest run's task is unfinished: the due read says so.
    let mut due_again = stored.clone();
    due_again.next_fire_at = Some(secs(0));
    assert!(s.schedule_update(&due_again, secs(5)).await.unwrap());
    let due = s.schedule_due(secs(5), 10).await.unwrap();
    assert!(due[0].previous_unfinished);

    // CANCEL_PREVIOUS cancels the pending task in the same transaction.
    let mut f = fire(&due[0].schedule, due[0].schedule.version, &[4], 30);
    f.cancel_task_id = Some(runs[1].task_id.clone());
    assert!(matches!(s.schedule_fire(&f).await.unwrap(), Fired::Done(_)));
    let cancelled = s.task_get(&runs[1].task_id).await.unwrap().unwrap();
    assert_eq!(cancelled.state, StoredState::Cancelled);

    // The history: newest first, with the task state; it outlives the task.
    let history = |before| {
        let s = s.clone();
        async move {
            s.schedule_run_list(&ScheduleRunFilter {
                schedule_id: "a".into(),
                before_fire_time: before,
                limit: 10,
            })
            .await
            .unwrap()
        }
    };
    let h = history(None).await;
    let times: Vec<_> = h.iter().map(|r| r.fire_time).collect();
    assert_eq!(times, [secs(4), secs(2), secs(1)]);
    assert_eq!(h[1].task_state, Some(StoredState::Cancelled));
    assert_eq!(history(Some(secs(2))).await.len(), 1);
    let purged = s
        .task_purge_finished(secs(1000), &PurgeScope::AllExcept(vec![]), 100)
        .await
        .unwrap();
    assert_eq!(purged, 1);
    let h = history(None).await;
    assert_eq!(h.len(), 3, "runs outlive task retention");
    assert_eq!(h[1].task_state, None);

    assert!(s.schedule_delete("a").await.unwrap());
    assert!(history(None).await.is_empty());
}

/// Two store instances (as two broker replicas would hold) fire the same due
/// schedules at once: each fire time makes one task.
pub async fn two_stores_racing_on_due_schedules_fire_each_once(b: Backend) {
    let Some((s1, db)) = open(b).await else {
        return;
    };
    let s2: Arc<dyn Store> = store::connect(&db.url, 8).await.unwrap();
    const N: usize = 20;
    for i in 0..N {
        s1.schedule_insert(&schedule(&format!("s{i:02}"), Some(secs(1))))
            .await
            .unwrap();
    }
    let due1 = s1.schedule_due(secs(1), 100).await.unwrap();
    let due2 = s2.schedule_due(secs(1), 100).await.unwrap();
    assert_eq!((due1.len(), due2.len()), (N, N));
    let mut races = Vec::new();
    for (i, (d1, d2)) in due1.into_iter().zip(due2).enumerate() {
        let (s1, s2) = (s1.clone(), s2.clone());
        races.push(tokio::spawn(async move {
            let f1 = fire(&d1.schedule, d1.schedule.version, &[1], 1000 + i as i64);
            let f2 = fire(&d2.schedule, d2.schedule.version, &[1], 2000 + i as i64);
            let (r1, r2) = tokio::join!(s1.schedule_fire(&f1), s2.schedule_fire(&f2));
            [r1.unwrap(), r2.unwrap()]
        }));
    }
    for r in races {
        let outcomes = r.await.unwrap();
        let applied = outcomes
            .iter()
            .filter(|o| matches!(o, Fired::Done(_)))
            .count();
        assert_eq!(applied, 1, "{outcomes:?}");
    }
    let tasks = s1
        .task_list(&TaskFilter {
            limit: 1000,
            now: secs(2),
            ..TaskFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(tasks.len(), N);
    s2.close().await;
}

/// A fire of several copies records one run named by the first copy; a fire
/// whose key is taken makes no task and its run names the task holding the key,
/// recorded once like any other.
pub async fn schedule_fire_makes_copies_and_deduplicates_by_key(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let a = schedule("a", Some(secs(1)));
    s.schedule_insert(&a).await.unwrap();
    let group: Vec<NewTask> = (1..=3)
        .map(|n| {
            let mut t = task_for("a", n);
            t.routing.fanout_group = Some(task_for("a", 1).id);
            t
        })
        .collect();
    let keyed = |n: i64| NewTask {
        key: Some("report".into()),
        ..task_for("a", n)
    };
    let mut f = fire(&a, 0, &[], 0);
    f.runs = vec![
        NewRun {
            fire_time: secs(1),
            tasks: group,
            triggered: false,
        },
        NewRun {
            fire_time: secs(2),
            tasks: vec![keyed(10)],
            triggered: false,
        },
        NewRun {
            fire_time: secs(3),
            tasks: vec![keyed(11)],
            triggered: false,
        },
    ];
    let Fired::Done(runs) = s.schedule_fire(&f).await.unwrap() else {
        panic!("applies");
    };
    assert_eq!(
        runs.iter()
            .map(|r| (r.task_id.clone(), r.inserted, r.copies))
            .collect::<Vec<_>>(),
        [
            (task_for("a", 1).id, true, 3),
            (task_for("a", 10).id, true, 1),
            (task_for("a", 10).id, false, 1),
        ]
    );
    for n in 1..=3 {
        let t = s.task_get(&task_for("a", n).id).await.unwrap().unwrap();
        assert_eq!(t.schedule_id.as_deref(), Some("a"));
        assert_eq!(t.fire_time, Some(secs(1)));
        assert_eq!(t.routing.fanout_group, Some(task_for("a", 1).id));
    }
    assert!(s.task_get(&task_for("a", 11).id).await.unwrap().is_none());
    let stored = s.schedule_get("a").await.unwrap().unwrap();
    assert_eq!(stored.runs, 2, "the deduplicated fire made no task");
    assert_eq!(stored.last_fire_at, Some(secs(2)));
    // Every fire time is recorded once, the third naming the key's holder.
    let listed = s
        .schedule_run_list(&ScheduleRunFilter {
            schedule_id: "a".into(),
            before_fire_time: None,
            limit: 10,
        })
        .await
        .unwrap();
    let ids: Vec<(DateTime<Utc>, String)> = listed
        .into_iter()
        .map(|r| (r.fire_time, r.task_id))
        .collect();
    assert_eq!(
        ids,
        [
            (secs(3), task_for("a", 10).id),
            (secs(2), task_for("a", 10).id),
            (secs(1), task_for("a", 1).id),
        ]
    );
    // Firing the third fire time again records nothing new.
    let mut again = fire(&stored, stored.version, &[], 0);
    again.runs = vec![NewRun {
        fire_time: secs(3),
        tasks: vec![keyed(12)],
        triggered: false,
    }];
    let Fired::Done(r) = s.schedule_fire(&again).await.unwrap() else {
        panic!("applies");
    };
    assert_eq!(
        (r[0].task_id.clone(), r[0].inserted),
        (task_for("a", 10).id, false)
    );
}
