//! Flow handlers of `AdminService`: ListTaskEvents, WatchTasks, CancelTasks,
//! RequeueTasks; and the flow fields of TaskSpec and Task.

use std::collections::HashSet;
use std::pin::Pin;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use super::convert::{self, duration, timestamp, to_timestamp};
use super::error::{invalid, status};
use crate::domain::TaskState;
use crate::domain::event::EventKind;
use crate::domain::validate::{self, Invalid};
use crate::pb;
use crate::service::{Broker, BulkOutcome, ServiceError, WatchFilter};
use crate::store::{BulkFilter, EventRecord, FlowSpec, TaskFlowInfo, TaskRecord};

/// The WatchTasks response stream.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchTasksResponse, Status>> + Send>>;

const MAX_WATCH_TASKS: usize = 1000;
const MAX_WATCH_QUEUES: usize = 64;

fn kind_to_pb(k: EventKind) -> pb::TaskEventKind {
    use pb::TaskEventKind as P;
    match k {
        EventKind::Submitted => P::Submitted,
        EventKind::Leased => P::Leased,
        EventKind::HeartbeatLost => P::HeartbeatLost,
        EventKind::Checkpointed => P::Checkpointed,
        EventKind::Failed => P::Failed,
        EventKind::RetryScheduled => P::RetryScheduled,
        EventKind::Succeeded => P::Succeeded,
        EventKind::Dead => P::Dead,
        EventKind::Cancelled => P::Cancelled,
        EventKind::Requeued => P::Requeued,
        EventKind::Updated => P::Updated,
        EventKind::Unblocked => P::Unblocked,
        EventKind::Replaced => P::Replaced,
    }
}

fn kind_from_pb(field: &str, v: i32) -> Result<EventKind, Invalid> {
    use pb::TaskEventKind as P;
    Ok(match P::try_from(v) {
        Ok(P::Submitted) => EventKind::Submitted,
        Ok(P::Leased) => EventKind::Leased,
        Ok(P::HeartbeatLost) => EventKind::HeartbeatLost,
        Ok(P::Checkpointed) => EventKind::Checkpointed,
        Ok(P::Failed) => EventKind::Failed,
        Ok(P::RetryScheduled) => EventKind::RetryScheduled,
        Ok(P::Succeeded) => EventKind::Succeeded,
        Ok(P::Dead) => EventKind::Dead,
        Ok(P::Cancelled) => EventKind::Cancelled,
        Ok(P::Requeued) => EventKind::Requeued,
        Ok(P::Updated) => EventKind::Updated,
        Ok(P::Unblocked) => EventKind::Unblocked,
        Ok(P::Replaced) => EventKind::Replaced,
        _ => return Err(Invalid::new(field, format!("{v} is not an event kind"))),
    })
}

pub fn event(e: EventRecord) -> pb::TaskEvent {
    pb::TaskEvent {
        event_id: e.event_id.max(0) as u64,
        task_id: e.task_id,
        queue: e.queue,
        kind: kind_to_pb(e.kind) as i32,
        state: convert::state_to_pb(e.state) as i32,
        attempt: e.attempt,
        worker_id: e.worker_id.unwrap_or_default(),
        time: Some(to_timestamp(e.time)),
        detail: e.detail.unwrap_or_default(),
    }
}

/// Fills the flow fields of admin Tasks (one read for all of them).
pub async fn with_flow(broker: &Broker, mut tasks: Vec<pb::Task>) -> Result<Vec<pb::Task>, Status> {
    let ids: Vec<String> = tasks.iter().map(|t| t.id.clone()).collect();
    let info = broker.flow_info(&ids).await.map_err(status)?;
    for t in &mut tasks {
        if let Some(i) = info.get(&t.id) {
            fill(t, i);
        }
    }
    Ok(tasks)
}

fn fill(t: &mut pb::Task, i: &TaskFlowInfo) {
    t.depends_on = i.depends_on.clone();
    t.depends_on_keys = i
        .depends_on_keys
        .iter()
        .map(|k| pb::TaskKey {
            queue: k.queue.clone(),
            key: k.key.clone(),
        })
        .collect();
    t.dependencies_remaining = if t.state == pb::TaskState::Blocked as i32 {
        i.deps_remaining
    } else {
        0
    };
    t.run_if_dependency_fails = i.run_if_dependency_fails;
    t.cancel_reason = if t.state != pb::TaskState::Cancelled as i32 {
        pb::CancelReason::Unspecified
    } else if i.cancel_reason.as_deref() == Some("dependency_failed") {
        pb::CancelReason::DependencyFailed
    } else {
        pb::CancelReason::Operator
    } as i32;
}

pub async fn list_task_events(
    broker: &Broker,
    request: Request<pb::ListTaskEventsRequest>,
) -> Result<Response<pb::ListTaskEventsResponse>, Status> {
    let producer = super::producer_of(&request);
    let r = request.into_inner();
    if producer.is_some() {
        let t = broker.get_task(&r.task_id).await.map_err(status)?;
        super::own(&t, producer.as_deref())?;
    }
    let after = decode_token(&r.page_token).map_err(invalid)?;
    let page = if r.page_size == 0 { 100 } else { r.page_size };
    let events = broker
        .list_task_events(&r.task_id, after, r.page_size)
        .await
        .map_err(status)?;
    let next_page_token = match events.last() {
        Some(e) if events.len() as i32 == page => encode_token(e.event_id),
        _ => String::new(),
    };
    Ok(Response::new(pb::ListTaskEventsResponse {
        events: events.into_iter().map(event).collect(),
        next_page_token,
    }))
}

const TOKEN_PREFIX: &str = "e1:";

fn encode_token(id: i64) -> String {
    URL_SAFE_NO_PAD.encode(format!("{TOKEN_PREFIX}{id}"))
}

fn decode_token(token: &str) -> Result<i64, Invalid> {
    if token.is_empty() {
        return Ok(0);
    }
    let bad = || Invalid::new("page_token", "is not a token from a previous response");
    let raw = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad())?;
    let text = String::from_utf8(raw).map_err(|_| bad())?;
    text.strip_prefix(TOKEN_PREFIX)
        .and_then(|v| v.parse().ok())
        .ok_or_else(bad)
}

fn watch_filter(r: &pb::WatchTasksRequest) -> Result<WatchFilter, Invalid> {
    if r.task_ids.len() > MAX_WATCH_TASKS {
        return Err(Invalid::new(
            "task_ids",
            format!("names more than {MAX_WATCH_TASKS} tasks"),
        ));
    }
    if r.queues.len() > MAX_WATCH_QUEUES {
        return Err(Invalid::new(
            "queues",
            format!("names more than {MAX_WATCH_QUEUES} queues"),
        ));
    }
    for (i, id) in r.task_ids.iter().enumerate() {
        validate::identifier(&format!("task_ids[{i}]"), id, 128)?;
    }
    for (i, q) in r.queues.iter().enumerate() {
        validate::queue_name(&format!("queues[{i}]"), q)?;
    }
    let kinds = r
        .kinds
        .iter()
        .enumerate()
        .map(|(i, k)| kind_from_pb(&format!("kinds[{i}]"), *k))
        .collect::<Result<HashSet<_>, _>>()?;
    Ok(WatchFilter {
        task_ids: r.task_ids.iter().cloned().collect(),
        queues: r.queues.iter().cloned().collect(),
        kinds,
    })
}

pub async fn watch_tasks(
    broker: &Broker,
    request: Request<pb::WatchTasksRequest>,
) -> Result<Response<WatchStream>, Status> {
    let producer = super::producer_of(&request);
    let r = request.into_inner();
    let filter = watch_filter(&r).map_err(invalid)?;
    // A producer watches only tasks it submitted, named one by one.
    if producer.is_some() {
        if r.task_ids.is_empty() {
            return Err(invalid(Invalid::new(
                "task_ids",
                "is required with a producer token",
            )));
        }
        for id in &r.task_ids {
            let t = broker.get_task(id).await.map_err(status)?;
            super::own(&t, producer.as_deref())?;
        }
    }
    // A cursor past i64::MAX is past every event id too.
    let after = match r.after_event_id {
        0 => None,
        a => Some(i64::try_from(a).unwrap_or(i64::MAX)),
    };
    let after = broker.events().cursor(after).await.map_err(status)?;
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    broker.events().watch(filter, after, tx);
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(
        |r: Result<Vec<EventRecord>, ServiceError>| match r {
            Ok(events) => Ok(pb::WatchTasksResponse {
                events: events.into_iter().map(event).collect(),
            }),
            Err(e) => Err(status(e)),
        },
    );
    Ok(Response::new(Box::pin(stream)))
}

fn bulk_filter(f: Option<pb::TaskSelector>) -> Result<BulkFilter, Invalid> {
    let f = f.ok_or_else(|| Invalid::new("filter", "is required"))?;
    let states = f
        .states
        .iter()
        .enumerate()
        .map(|(i, s)| convert::state_from_pb(&format!("filter.states[{i}]"), *s))
        .collect::<Result<Vec<TaskState>, _>>()?;
    Ok(BulkFilter {
        created_after: timestamp("filter.created_after", f.created_after.as_ref())?,
        created_before: timestamp("filter.created_before", f.created_before.as_ref())?,
        queue: f.queue,
        states,
        key_prefix: (!f.key_prefix.is_empty()).then_some(f.key_prefix),
        error_contains: (!f.error_contains.is_empty()).then_some(f.error_contains),
        schedule_id: (!f.schedule_id.is_empty()).then_some(f.schedule_id),
        ..Default::default()
    })
}

fn summary(t: &TaskRecord, now: chrono::DateTime<chrono::Utc>) -> pb::TaskSummary {
    pb::TaskSummary {
        task_id: t.id.clone(),
        queue: t.queue.clone(),
        key: t.key.clone().unwrap_or_default(),
        state: convert::state_to_pb(TaskState::of(t.state, t.run_at, now)) as i32,
        last_error: t.last_error.clone().unwrap_or_default(),
        created_at: Some(to_timestamp(t.created_at)),
    }
}

fn sample(o: &BulkOutcome) -> Vec<pb::TaskSummary> {
    o.sample.iter().map(|t| summary(t, o.now)).collect()
}

pub async fn cancel_tasks(
    broker: &Broker,
    request: Request<pb::CancelTasksRequest>,
) -> Result<Response<pb::CancelTasksResponse>, Status> {
    let r = request.into_inner();
    let f = bulk_filter(r.filter).map_err(invalid)?;
    let o = broker
        .cancel_tasks(f, r.dry_run, r.max_tasks)
        .await
        .map_err(status)?;
    Ok(Response::new(pb::CancelTasksResponse {
        matched: o.matched,
        cancelled: o.changed,
        cancel_requested: o.cancel_requested,
        sample: sample(&o),
    }))
}

pub async fn requeue_tasks(
    broker: &Broker,
    request: Request<pb::RequeueTasksRequest>,
) -> Result<Response<pb::RequeueTasksResponse>, Status> {
    let r = request.into_inner();
    let f = bulk_filter(r.filter).map_err(invalid)?;
    let o = broker
        .requeue_tasks(f, r.dry_run, r.max_tasks, r.rate_per_second)
        .await
        .map_err(status)?;
    Ok(Response::new(pb::RequeueTasksResponse {
        matched: o.matched,
        requeued: o.changed,
        sample: sample(&o),
        last_run_at: o.last_run_at.map(to_timestamp),
    }))
}

/// The flow fields of `tasks[i]` (depends_on, depends_on_index,
/// run_if_dependency_fails, retry.schedule).
pub fn flow_spec(i: usize, t: &pb::TaskSpec) -> Result<FlowSpec, Invalid> {
    let schedule = match &t.retry {
        None => Vec::new(),
        Some(r) => r
            .schedule
            .iter()
            .enumerate()
            .map(|(j, d)| {
                duration(&format!("tasks[{i}].retry.schedule[{j}]"), Some(d))
                    .map(Option::unwrap_or_default)
            })
            .collect::<Result<_, _>>()?,
    };
    Ok(FlowSpec {
        depends_on: t.depends_on.clone(),
        depends_on_index: t
            .depends_on_index
            .iter()
            .map(|&k| usize::try_from(k).unwrap_or(usize::MAX))
            .collect(),
        depends_on_keys: t
            .depends_on_keys
            .iter()
            .map(|k| crate::store::TaskKey {
                queue: k.queue.clone(),
                key: k.key.clone(),
            })
            .collect(),
        run_if_dependency_fails: t.run_if_dependency_fails,
        retry_schedule: schedule,
        // Set by the service from the caller's token.
        producer: None,
    })
}
