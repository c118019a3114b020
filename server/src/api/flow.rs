//! Flow (#15) handlers of `AdminService`: ListTaskEvents, WatchTasks, CancelTasks,
//! RequeueTasks.

use std::pin::Pin;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::pb;
use crate::service::Broker;

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
