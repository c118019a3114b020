//! Schedule templates that target, fan out, gate and key their tasks, end to
//! end over gRPC on every database with the manual clock: the template's
//! target, sticky, fanout, concurrency_key and key template are stored and
//! read back, each fire makes tasks carrying them, a fire whose expanded key is
//! taken makes no task, and hostile templates are refused naming their field.
//! One pass makes at most what one Submit may (fan-out copies counted).

mod common;

use std::time::Duration;

use common::*;
use taskbroker_client::pb;
use taskbroker_client::pb::schedule_service_client::ScheduleServiceClient;
use tonic::Code;
use tonic::transport::Channel;

type Schedules = ScheduleServiceClient<Channel>;

fn every(id: &str, secs: i64, task: pb::TaskTemplate) -> pb::Schedule {
    pb::Schedule {
        schedule_id: id.into(),
        spec: Some(pb::ScheduleSpec {
            kind: Some(pb::schedule_spec::Kind::Every(prost_types::Duration {
                seconds: secs,
                nanos: 0,
            })),
            ..Default::default()
        }),
        task: Some(task),
        overlap: pb::OverlapPolicy::Allow as i32,
        ..Default::default()
    }
}

fn template(queue: &str) -> pb::TaskTemplate {
    pb::TaskTemplate {
        queue: queue.into(),
        payload: b"tick".to_vec(),
        ..Default::default()
    }
}

fn fanout(copies: u32) -> Option<pb::Fanout> {
    Some(pb::Fanout {
        copies,
        distinct_workers: true,
    })
}

async fn create(c: &mut Schedules, s: pb::Schedule) -> Result<pb::Schedule, tonic::Status> {
    c.create_schedule(pb::CreateScheduleRequest { schedule: Some(s) })
        .await
        .map(|r| r.into_inner().schedule.unwrap())
}

async fn tasks_in(app: &TestApp, queue: &str) -> Vec<pb::Task> {
    app.admin()
        .await
        .list_tasks(pb::ListTasksRequest {
            queue: queue.into(),
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tasks
}

/// The new fields round-trip through Create, Get and List, and each fire makes
/// `copies` tasks of one group, each targeted, sticky and gated by the key.
async fn a_template_targets_fans_out_and_gates_each_fire(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.schedules().await;
    let t = pb::TaskTemplate {
        target: Some(pb::Target {
            worker_id: String::new(),
            labels: [("gpu".to_string(), "a100".to_string())].into(),
        }),
        sticky: Some(pb::StickyPolicy {
            strategy: pb::StickyStrategy::Soft as i32,
            timeout: secs(90),
        }),
        fanout: fanout(3),
        concurrency_key: "tenant-1".into(),
        ..template("gpu")
    };
    let created = create(&mut c, every("fan", 60, t.clone())).await.unwrap();
    let want = pb::TaskTemplate {
        retry: created.task.as_ref().unwrap().retry.clone(),
        ..t
    };
    assert_eq!(created.task.as_ref(), Some(&want));
    let got = c
        .get_schedule(pb::GetScheduleRequest {
            schedule_id: "fan".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .schedule
        .unwrap();
    assert_eq!(got.task.as_ref(), Some(&want));
    let listed = c
        .list_schedules(pb::ListSchedulesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .schedules;
    assert_eq!(listed[0].task.as_ref(), Some(&want));

    // The first fire time is the anchor, now.
    let pass = app.fire_schedules().await;
    assert_eq!(pass.fired, 3, "one fire, three copies");
    let tasks = tasks_in(&app, "gpu").await;
    assert_eq!(tasks.len(), 3);
    let group = tasks[0].fanout_group.clone();
    assert!(!group.is_empty());
    for task in &tasks {
        assert_eq!(task.fanout_group, group);
        assert_eq!(task.schedule_id, "fan");
        assert_eq!(task.concurrency_key, "tenant-1");
        assert_eq!(task.target.as_ref().unwrap().labels["gpu"], "a100");
        assert_eq!(
            task.sticky.as_ref().map(|s| s.strategy),
            Some(pb::StickyStrategy::Soft as i32)
        );
    }
    // A worker without the label gets none of them.
    let mut broker = app.broker().await;
    assert!(lease(&mut broker, "gpu", 10).await.is_empty());
}

/// `{fire_time}` and `{schedule_id}` expand per fire; a fire time whose key a
/// task holds makes no task, and its run names that task.
async fn a_fire_whose_key_is_taken_makes_no_task(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.schedules().await;
    let created = create(
        &mut c,
        every(
            "daily",
            60,
            pb::TaskTemplate {
                key: "{schedule_id}@{fire_time}".into(),
                ..template("reports")
            },
        ),
    )
    .await
    .unwrap();
    let first = from_ts(&created.next_fire_at);
    let second = first + chrono::Duration::seconds(60);
    let key_of = |t: chrono::DateTime<chrono::Utc>| {
        format!(
            "daily@{}",
            t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        )
    };
    // Someone already made the second fire's report by hand.
    let mut broker = app.broker().await;
    let by_hand = submit_one(
        &mut broker,
        pb::TaskSpec {
            key: key_of(second),
            ..spec("reports")
        },
    )
    .await;
    app.advance(Duration::from_secs(60));
    let pass = app.fire_schedules().await;
    assert_eq!(pass.fired, 1, "the second fire time was deduplicated");
    let tasks = tasks_in(&app, "reports").await;
    assert_eq!(tasks.len(), 2);
    let fired = tasks.iter().find(|t| t.id != by_hand).unwrap();
    assert_eq!(fired.key, key_of(first));
    let runs = c
        .list_schedule_runs(pb::ListScheduleRunsRequest {
            schedule_id: "daily".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .runs;
    let recorded: Vec<(chrono::DateTime<chrono::Utc>, String)> = runs
        .iter()
        .map(|r| (from_ts(&r.fire_time), r.task_id.clone()))
        .collect();
    assert_eq!(
        recorded,
        [(second, by_hand.clone()), (first, fired.id.clone())],
        "each fire time recorded once, the second naming the key's holder"
    );
    let s = c
        .get_schedule(pb::GetScheduleRequest {
            schedule_id: "daily".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .schedule
        .unwrap();
    assert_eq!(s.runs, 1);
    // Another pass at the same time fires nothing again.
    assert_eq!(app.fire_schedules().await.fired, 0);
    assert_eq!(tasks_in(&app, "reports").await.len(), 2);
}

/// Hostile templates: each refused naming its field, nothing stored.
async fn hostile_templates_are_refused_naming_their_field(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.schedules().await;
    let cases: Vec<(pb::TaskTemplate, &str)> = vec![
        (
            pb::TaskTemplate {
                key: "r-{fire}".into(),
                ..template("q")
            },
            "schedule.task.key",
        ),
        (
            pb::TaskTemplate {
                key: "r-{fire_time".into(),
                ..template("q")
            },
            "schedule.task.key",
        ),
        (
            pb::TaskTemplate {
                key: "}".into(),
                ..template("q")
            },
            "schedule.task.key",
        ),
        (
            // 500 characters and a 24-character fire time: over 512 once expanded.
            pb::TaskTemplate {
                key: format!("{}{{fire_time}}", "k".repeat(500)),
                ..template("q")
            },
            "schedule.task.key",
        ),
        (
            pb::TaskTemplate {
                key: "r-{fire_time}".into(),
                fanout: fanout(2),
                ..template("q")
            },
            "schedule.task.key",
        ),
        (
            pb::TaskTemplate {
                fanout: fanout(1001),
                ..template("q")
            },
            "schedule.task.fanout.copies",
        ),
        (
            pb::TaskTemplate {
                fanout: fanout(0),
                ..template("q")
            },
            "schedule.task.fanout.copies",
        ),
        (
            // 1000 copies of 16 KiB: 16 MB per fire, over what one Submit stores.
            pb::TaskTemplate {
                fanout: fanout(1000),
                payload: vec![b'x'; 16 << 10],
                ..template("q")
            },
            "schedule.task.fanout.copies",
        ),
        (
            pb::TaskTemplate {
                target: Some(pb::Target {
                    worker_id: String::new(),
                    labels: [("bad key!".to_string(), "v".to_string())].into(),
                }),
                ..template("q")
            },
            "schedule.task.target.labels",
        ),
        (
            pb::TaskTemplate {
                sticky: Some(pb::StickyPolicy {
                    strategy: 9,
                    timeout: None,
                }),
                ..template("q")
            },
            "schedule.task.sticky.strategy",
        ),
        (
            pb::TaskTemplate {
                sticky: Some(pb::StickyPolicy {
                    strategy: pb::StickyStrategy::Soft as i32,
                    timeout: secs(100_000),
                }),
                ..template("q")
            },
            "schedule.task.sticky.timeout",
        ),
        (
            pb::TaskTemplate {
                concurrency_key: "x".repeat(300),
                ..template("q")
            },
            "schedule.task.concurrency_key",
        ),
    ];
    for (i, (t, field)) in cases.into_iter().enumerate() {
        let e = create(&mut c, every(&format!("h{i}"), 60, t))
            .await
            .unwrap_err();
        assert!(
            matches!(e.code(), Code::InvalidArgument | Code::ResourceExhausted),
            "case {i}: {e:?}"
        );
        let got = bad_field(&e);
        assert!(
            got.as_deref().is_some_and(|g| g.starts_with(field)),
            "case {i}: {got:?} for {field}: {e:?}"
        );
    }
    let listed = c
        .list_schedules(pb::ListSchedulesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .schedules;
    assert!(listed.is_empty(), "nothing stored");
    // The largest allowed: 1000 copies of a small task.
    create(
        &mut c,
        every(
            "wide",
            1,
            pb::TaskTemplate {
                fanout: fanout(1000),
                ..template("wide")
            },
        ),
    )
    .await
    .unwrap();
}

/// Catch-up is bounded after expansion: a schedule of 1000 copies per fire
/// with four fire times due makes 1000 tasks per pass, not 4000, and catches
/// up over the next passes.
async fn catch_up_of_a_wide_fan_out_is_bounded_per_pass(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.schedules().await;
    create(
        &mut c,
        pb::Schedule {
            misfire: pb::MisfirePolicy::CatchUp as i32,
            ..every(
                "wide",
                1,
                pb::TaskTemplate {
                    fanout: fanout(1000),
                    payload: Vec::new(),
                    ..template("wide")
                },
            )
        },
    )
    .await
    .unwrap();
    // Fire times now, +1 s, +2 s and +3 s are due.
    app.advance(Duration::from_secs(3));
    for _ in 0..4 {
        let pass = app.fire_schedules().await;
        assert_eq!(pass.fired, 1000, "one fire time per pass");
    }
    assert_eq!(app.fire_schedules().await.fired, 0, "caught up");
}

/// Two brokers race scheduler passes over schedules that share one key
/// template: each fire time makes exactly one task whichever schedule and
/// broker get there first, and every schedule records each fire time once.
async fn two_brokers_racing_on_a_shared_key_make_one_task_per_fire_time(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let second = spawn_on(app.db.clone(), Options::default()).await;
    let mut c = app.schedules().await;
    const N: usize = 8;
    const STEPS: i64 = 4;
    for i in 0..N {
        let t = pb::TaskTemplate {
            key: "shared-{fire_time}".into(),
            ..template("shared")
        };
        create(&mut c, every(&format!("s{i}"), 1, t)).await.unwrap();
    }
    let t0 = app.clock.now_utc();
    let (x, y) = (second.service(), app.service());
    use taskbroker_server::maintenance::Scheduler;
    let mut fired = 0;
    for step in 0..STEPS {
        let now = t0 + chrono::Duration::seconds(step);
        let sx = Scheduler::new(x.clone(), Duration::from_secs(1));
        let sy = Scheduler::new(y.clone(), Duration::from_secs(1));
        let (px, py) = tokio::join!(sx.run_once(now), sy.run_once(now));
        fired += px.unwrap().fired + py.unwrap().fired;
    }
    assert_eq!(fired, STEPS as u64, "one task per fire time");
    let tasks = tasks_in(&app, "shared").await;
    let mut keys: Vec<String> = tasks.iter().map(|t| t.key.clone()).collect();
    keys.sort();
    let want: Vec<String> = (0..STEPS)
        .map(|s| {
            let t = t0 + chrono::Duration::seconds(s);
            format!(
                "shared-{}",
                t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            )
        })
        .collect();
    assert_eq!(keys, want);
    let mut made = 0;
    for i in 0..N {
        let runs = c
            .list_schedule_runs(pb::ListScheduleRunsRequest {
                schedule_id: format!("s{i}"),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .runs;
        assert_eq!(runs.len(), STEPS as usize, "s{i}: every fire time once");
        for r in &runs {
            assert!(
                tasks.iter().any(|t| t.id == r.task_id),
                "s{i}: names a task"
            );
        }
        made += c
            .get_schedule(pb::GetScheduleRequest {
                schedule_id: format!("s{i}"),
            })
            .await
            .unwrap()
            .into_inner()
            .schedule
            .unwrap()
            .runs;
    }
    assert_eq!(made, STEPS as u64, "runs count the tasks made");
    second.shutdown().await;
}

all_backends!(
    two_brokers_racing_on_a_shared_key_make_one_task_per_fire_time,
    a_template_targets_fans_out_and_gates_each_fire,
    a_fire_whose_key_is_taken_makes_no_task,
    hostile_templates_are_refused_naming_their_field,
    catch_up_of_a_wide_fan_out_is_bounded_per_pass,
);
