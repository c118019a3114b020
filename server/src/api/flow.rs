//! Flow (#15) handlers of `AdminService`: ListTaskEvents, WatchTasks, CancelTasks,
//! RequeueTasks.

use std::pin::Pin;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::convert::duration;
use crate::domain::validate::Invalid;
use crate::pb;
use crate::service::Broker;
use crate::store::FlowSpec;

/// The WatchTasks response stream.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchTasksResponse, Status>> + Send>>;

pub async fn list_task_events(
    _broker: &Broker,
    _request: Request<pb::ListTaskEventsRequest>,
) -> Result<Response<pb::ListTaskEventsResponse>, Status> {
    Err(Status::unimplemented(
        "ListTaskEvents is not implemented yet",
    ))
}

pub async fn watch_tasks(
    _broker: &Broker,
    _request: Request<pb::WatchTasksRequest>,
) -> Result<Response<WatchStream>, Status> {
    Err(Status::unimplemented("WatchTasks is not implemented yet"))
}

pub async fn cancel_tasks(
    _broker: &Broker,
    _request: Request<pb::CancelTasksRequest>,
) -> Result<Response<pb::CancelTasksResponse>, Status> {
    Err(Status::unimplemented("CancelTasks is not implemented yet"))
}

pub async fn requeue_tasks(
    _broker: &Broker,
    _request: Request<pb::RequeueTasksRequest>,
) -> Result<Response<pb::RequeueTasksResponse>, Status> {
    Err(Status::unimplemented("RequeueTasks is not implemented yet"))
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
        run_if_dependency_fails: t.run_if_dependency_fails,
        retry_schedule: schedule,
    })
}
