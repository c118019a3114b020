//! The `schedule_every` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::Duration;

use taskbroker_client::Client;
use taskbroker_client::pb;
use taskbroker_client::time::to_proto_duration;

use crate::{Outcome, check};

pub(crate) async fn schedule_every(c: Client, q: String) -> Outcome {
    use taskbroker_client::NewSchedule;
    use taskbroker_client::pb::{OverlapPolicy, ScheduleState};
    let s = NewSchedule::every(&q, Duration::from_secs(1))
        .queue(&q)
        .payload(b"tick".to_vec())
        .overlap(OverlapPolicy::Allow);
    let created = c.schedules().create(s).await.map_err(|e| e.to_string())?;
    check(
        created.state() == ScheduleState::Active,
        format!("state {:?}, want ACTIVE", created.state()),
    )?;
    for _ in 0..2 {
        let req = pb::LeaseRequest {
            labels: Default::default(),
            worker_id: "conf-rust".into(),
            queues: vec![q.clone()],
            max_tasks: 1,
            lease_duration: Some(to_proto_duration(Duration::from_secs(30))),
            wait: Some(to_proto_duration(Duration::from_secs(10))),
        };
        let mut tasks = c.lease(req).await.map_err(|e| e.to_string())?;
        let t = tasks.pop().ok_or("no scheduled task within 10s")?;
        check(t.payload == b"tick", format!("payload {:?}", t.payload))?;
        check(
            t.metadata.get("taskbroker.schedule_id") == Some(&q),
            format!("metadata {:?} lacks taskbroker.schedule_id", t.metadata),
        )?;
        c.complete(pb::CompleteRequest {
            task_id: t.task_id,
            lease_token: t.lease_token,
            result: Vec::new(),
            lease_next: None,
        })
        .await
        .map_err(|e| e.to_string())?;
    }
    let got = c.schedules().get(&q).await.map_err(|e| e.to_string())?;
    check(got.runs >= 2, format!("runs {}, want >= 2", got.runs))?;
    c.schedules().delete(&q).await.map_err(|e| e.to_string())?;
    match c.schedules().get(&q).await {
        Err(e) if e.code() == Some(tonic::Code::NotFound) => Ok(()),
        other => Err(format!("after delete: {other:?}, want NOT_FOUND")),
    }
}
