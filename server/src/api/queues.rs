//! Admission (#14): the AdminService calls on live queue settings
//! (GetQueue, ListQueues, UpdateQueue) and ExplainTask.

use tonic::{Request, Response, Status};

use crate::pb;
use crate::service::Broker;

pub(super) async fn get_queue(
    _broker: &Broker,
    _request: Request<pb::GetQueueRequest>,
) -> Result<Response<pb::GetQueueResponse>, Status> {
    Err(Status::unimplemented("GetQueue is not implemented yet"))
}

pub(super) async fn list_queues(
    _broker: &Broker,
    _request: Request<pb::ListQueuesRequest>,
) -> Result<Response<pb::ListQueuesResponse>, Status> {
    Err(Status::unimplemented("ListQueues is not implemented yet"))
}

pub(super) async fn update_queue(
    _broker: &Broker,
    _request: Request<pb::UpdateQueueRequest>,
) -> Result<Response<pb::UpdateQueueResponse>, Status> {
    Err(Status::unimplemented("UpdateQueue is not implemented yet"))
}

pub(super) async fn explain_task(
    _broker: &Broker,
    _request: Request<pb::ExplainTaskRequest>,
) -> Result<Response<pb::ExplainTaskResponse>, Status> {
    Err(Status::unimplemented("ExplainTask is not implemented yet"))
}
