//! ScheduleService end to end over real gRPC, on both databases, with the manual
//! clock: tests move time and run scheduler passes (`run_once`) themselves.

mod common;

use std::time::Duration;

use chrono::{DateTime, Utc};

use common::*;

use taskbroker_client::pb;

use taskbroker_client::pb::schedule_service_client::ScheduleServiceClient;

use tonic::Code;

use tonic::transport::Channel;

type Schedules = ScheduleServiceClient<Channel>;

fn every(id: &str, secs: u64, queue: &str) -> pb::Schedule {
    pb::Schedule {
        schedule_id: id.into(),
        spec: Some(pb::ScheduleSpec {
            kind: Some(pb::schedule_spec::Kind::Every(prost_types::Duration {
                seconds: secs as i64,
                nanos: 0,
            })),
            ..Default::default()
        }),
        task: Some(pb::TaskTemplate {
            queue: queue.into(),
            payload: b"tick".to_vec(),
            ..Default::default()
        }),
        overlap: pb::OverlapPolicy::Allow as i32,
        ..Default::default()
    }
}

fn cron(id: &str, line: &str, tz: &str) -> pb::Schedule {
    pb::Schedule {
        spec: Some(pb::ScheduleSpec {
            kind: Some(pb::schedule_spec::Kind::Cron(line.into())),
            timezone: tz.into(),
            anchor: None,
        }),
        ..every(id, 1, "cron")
    }
}

async fn create(c: &mut Schedules, s: pb::Schedule) -> pb::Schedule {
    c.create_schedule(pb::CreateScheduleRequest { schedule: Some(s) })
        .await
        .expect("create schedule")
        .into_inner()
        .schedule
        .unwrap()
}

async fn get_schedule(c: &mut Schedules, id: &str) -> pb::Schedule {
    c.get_schedule(pb::GetScheduleRequest {
        schedule_id: id.into(),
    })
    .await
    .expect("get schedule")
    .into_inner()
    .schedule
    .unwrap()
}

async fn tasks_of(app: &TestApp, id: &str) -> Vec<pb::Task> {
    let mut tasks = app
        .admin()
        .await
        .list_tasks(pb::ListTasksRequest {
            schedule_id: id.into(),
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tasks;
    tasks.sort_by_key(|t| from_ts(&t.fire_time));
    tasks
}

fn fire_times(tasks: &[pb::Task]) -> Vec<DateTime<Utc>> {
    tasks.iter().map(|t| from_ts(&t.fire_time)).collect()
}

fn secs_after(t: DateTime<Utc>, s: i64) -> DateTime<Utc> {
    t + chrono::Duration::seconds(s)
}

async fn runs(c: &mut Schedules, id: &str) -> Vec<pb::ScheduleRun> {
    c.list_schedule_runs(pb::ListScheduleRunsRequest {
        schedule_id: id.into(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .runs
}

async fn finish(app: &TestApp, queue: &str) {
    let mut b = app.broker().await;
    let t = lease_one(&mut b, queue).await;
    b.complete(pb::CompleteRequest {
        task_id: t.task_id,
        lease_token: t.lease_token,
        result: vec![],
        lease_next: None,
    })
    .await
    .unwrap();
}

async fn overlap(app: &TestApp, id: &str, policy: pb::OverlapPolicy) -> Vec<pb::Task> {
    let mut c = app.schedules().await;
    create(
        &mut c,
        pb::Schedule {
            overlap: policy as i32,
            ..every(id, 10, id)
        },
    )
    .await;
    app.fire_schedules().await; // the first run, left unfinished
    app.advance(Duration::from_secs(10));
    app.fire_schedules().await; // the second fire time overlaps it
    tasks_of(app, id).await
}

// Fire times: every, once and cron schedules, across daylight-saving changes.
#[path = "schedules/fire_times.rs"]
mod fire_times;
// Validation, preview, windows, pause, resume, trigger and max runs.
#[path = "schedules/lifecycle.rs"]
mod lifecycle;
// Overlap and misfire policies, racing brokers, and producers' own schedules.
#[path = "schedules/policies.rs"]
mod policies;
