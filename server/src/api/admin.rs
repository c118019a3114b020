//! `taskbroker.v1.AdminService`.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::convert::{self, timestamp};
use super::error::{invalid, status};
use crate::domain::validate::Invalid;
use crate::pb;
use crate::pb::admin_service_server::AdminService;
use crate::service::{Broker, ListTasks, UpdateTask};
use crate::store::TaskRecord;

pub struct AdminApi {
    broker: Arc<Broker>,
}

impl AdminApi {
    pub fn new(broker: Arc<Broker>) -> Self {
        AdminApi { broker }
    }

    fn task(&self, t: TaskRecord) -> Option<pb::Task> {
        Some(convert::task(t, self.broker.clock().now()))
    }

    /// One task as GetTask answers it: with its dependencies and cancel reason.
    async fn task_with_flow(&self, t: TaskRecord) -> Result<Option<pb::Task>, Status> {
        Ok(
            super::flow::with_flow(&self.broker, self.task(t).into_iter().collect())
                .await?
                .pop(),
        )
    }
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

#[tonic::async_trait]
impl AdminService for AdminApi {
    async fn get_task(
        &self,
        request: Request<pb::GetTaskRequest>,
    ) -> Result<Response<pb::GetTaskResponse>, Status> {
        let producer = super::producer_of(&request);
        let task_id = request.into_inner().task_id;
        let t = self.broker.get_task(&task_id).await.map_err(status)?;
        super::own(&t, producer.as_deref())?;
        // Flow: dependencies and cancel reason.
        let task = self.task_with_flow(t).await?;
        Ok(Response::new(pb::GetTaskResponse { task }))
    }

    async fn list_tasks(
        &self,
        request: Request<pb::ListTasksRequest>,
    ) -> Result<Response<pb::ListTasksResponse>, Status> {
        let r = request.into_inner();
        let states = r
            .states
            .iter()
            .enumerate()
            .map(|(i, s)| convert::state_from_pb(&format!("states[{i}]"), *s))
            .collect::<Result<Vec<_>, _>>()
            .map_err(invalid)?;
        let req = ListTasks {
            created_after: timestamp("created_after", r.created_after.as_ref()).map_err(invalid)?,
            created_before: timestamp("created_before", r.created_before.as_ref())
                .map_err(invalid)?,
            queue: non_empty(r.queue),
            states,
            key: non_empty(r.key),
            worker_id: non_empty(r.worker_id),
            last_error: None,
            schedule_id: non_empty(r.schedule_id),
            fanout_group: non_empty(r.fanout_group),
            target_worker: non_empty(r.target_worker_id),
            target_labels: r.target_labels.into_iter().collect(),
            metadata_key: non_empty(r.metadata_key),
            metadata_value: non_empty(r.metadata_value),
            page_size: r.page_size,
            page_token: r.page_token,
        };
        let page = self.broker.list_tasks(req).await.map_err(status)?;
        let now = page.now;
        let tasks = page
            .tasks
            .into_iter()
            .map(|t| convert::task(t, now))
            .collect();
        Ok(Response::new(pb::ListTasksResponse {
            // Flow: dependencies and cancel reason.
            tasks: super::flow::with_flow(&self.broker, tasks).await?,
            next_page_token: page.next_page_token,
        }))
    }

    async fn cancel_task(
        &self,
        request: Request<pb::CancelTaskRequest>,
    ) -> Result<Response<pb::CancelTaskResponse>, Status> {
        let t = self
            .broker
            .cancel_task(&request.into_inner().task_id)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::CancelTaskResponse {
            task: self.task_with_flow(t).await?,
        }))
    }

    async fn update_task(
        &self,
        request: Request<pb::UpdateTaskRequest>,
    ) -> Result<Response<pb::UpdateTaskResponse>, Status> {
        let r = request.into_inner();
        let req = UpdateTask {
            run_at: timestamp("run_at", r.run_at.as_ref()).map_err(invalid)?,
            deadline: timestamp("deadline", r.deadline.as_ref()).map_err(invalid)?,
            task_id: r.task_id,
            paths: r.update_mask.map(|m| m.paths).unwrap_or_default(),
            priority: r.priority,
            max_attempts: r.max_attempts,
            target: r
                .target
                .map(super::convert::target_from_pb)
                .unwrap_or_default(),
        };
        let t = self.broker.update_task(req).await.map_err(status)?;
        Ok(Response::new(pb::UpdateTaskResponse {
            task: self.task_with_flow(t).await?,
        }))
    }

    async fn requeue_task(
        &self,
        request: Request<pb::RequeueTaskRequest>,
    ) -> Result<Response<pb::RequeueTaskResponse>, Status> {
        let t = self
            .broker
            .requeue_task(&request.into_inner().task_id)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::RequeueTaskResponse {
            task: self.task_with_flow(t).await?,
        }))
    }

    async fn list_attempts(
        &self,
        request: Request<pb::ListAttemptsRequest>,
    ) -> Result<Response<pb::ListAttemptsResponse>, Status> {
        let producer = super::producer_of(&request);
        let task_id = request.into_inner().task_id;
        if producer.is_some() {
            let t = self.broker.get_task(&task_id).await.map_err(status)?;
            super::own(&t, producer.as_deref())?;
        }
        let attempts = self.broker.list_attempts(&task_id).await.map_err(status)?;
        Ok(Response::new(pb::ListAttemptsResponse {
            attempts: attempts.into_iter().map(convert::attempt).collect(),
        }))
    }

    async fn get_queue_stats(
        &self,
        request: Request<pb::GetQueueStatsRequest>,
    ) -> Result<Response<pb::GetQueueStatsResponse>, Status> {
        let (stats, now) = self
            .broker
            .queue_stats(request.into_inner().queues)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::GetQueueStatsResponse {
            queues: stats
                .into_iter()
                .map(|s| convert::queue_stats(s, now))
                .collect(),
        }))
    }

    // ---- Routing: the worker registry ----

    async fn list_workers(
        &self,
        request: Request<pb::ListWorkersRequest>,
    ) -> Result<Response<pb::ListWorkersResponse>, Status> {
        let r = request.into_inner();
        let page_size = u32::try_from(r.page_size)
            .map_err(|_| invalid(Invalid::new("page_size", "must be between 0 and 1000")))?;
        let page = self
            .broker
            .list_workers(crate::service::ListWorkers {
                queue: non_empty(r.queue),
                labels: r.labels.into_iter().collect(),
                page_size,
                page_token: non_empty(r.page_token),
            })
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ListWorkersResponse {
            workers: page.workers.into_iter().map(convert::worker).collect(),
            next_page_token: page.next_page_token.unwrap_or_default(),
        }))
    }

    async fn get_worker(
        &self,
        request: Request<pb::GetWorkerRequest>,
    ) -> Result<Response<pb::GetWorkerResponse>, Status> {
        let r = request.into_inner();
        let (worker, leases) = self.broker.get_worker(&r.worker_id).await.map_err(status)?;
        Ok(Response::new(pb::GetWorkerResponse {
            worker: Some(convert::worker(worker)),
            leases: leases.into_iter().map(convert::worker_lease).collect(),
        }))
    }

    // ---- Flow: events, watch, bulk operations (api/flow.rs) ----

    type WatchTasksStream = super::flow::WatchStream;

    async fn list_task_events(
        &self,
        request: Request<pb::ListTaskEventsRequest>,
    ) -> Result<Response<pb::ListTaskEventsResponse>, Status> {
        super::flow::list_task_events(&self.broker, request).await
    }

    async fn watch_tasks(
        &self,
        request: Request<pb::WatchTasksRequest>,
    ) -> Result<Response<Self::WatchTasksStream>, Status> {
        super::flow::watch_tasks(&self.broker, request).await
    }

    async fn cancel_tasks(
        &self,
        request: Request<pb::CancelTasksRequest>,
    ) -> Result<Response<pb::CancelTasksResponse>, Status> {
        super::flow::cancel_tasks(&self.broker, request).await
    }

    async fn requeue_tasks(
        &self,
        request: Request<pb::RequeueTasksRequest>,
    ) -> Result<Response<pb::RequeueTasksResponse>, Status> {
        super::flow::requeue_tasks(&self.broker, request).await
    }

    // Admission.
    async fn get_queue(
        &self,
        request: Request<pb::GetQueueRequest>,
    ) -> Result<Response<pb::GetQueueResponse>, Status> {
        super::admission::get_queue(&self.broker, request).await
    }

    async fn list_queues(
        &self,
        request: Request<pb::ListQueuesRequest>,
    ) -> Result<Response<pb::ListQueuesResponse>, Status> {
        super::admission::list_queues(&self.broker, request).await
    }

    async fn update_queue(
        &self,
        request: Request<pb::UpdateQueueRequest>,
    ) -> Result<Response<pb::UpdateQueueResponse>, Status> {
        super::admission::update_queue(&self.broker, request).await
    }

    async fn explain_task(
        &self,
        request: Request<pb::ExplainTaskRequest>,
    ) -> Result<Response<pb::ExplainTaskResponse>, Status> {
        super::admission::explain_task(&self.broker, request).await
    }

    // Limit buckets and cooldowns.

    async fn get_bucket(
        &self,
        request: Request<pb::GetBucketRequest>,
    ) -> Result<Response<pb::GetBucketResponse>, Status> {
        super::buckets::get_bucket(&self.broker, request).await
    }

    async fn list_buckets(
        &self,
        request: Request<pb::ListBucketsRequest>,
    ) -> Result<Response<pb::ListBucketsResponse>, Status> {
        super::buckets::list_buckets(&self.broker, request).await
    }

    async fn update_bucket(
        &self,
        request: Request<pb::UpdateBucketRequest>,
    ) -> Result<Response<pb::UpdateBucketResponse>, Status> {
        super::buckets::update_bucket(&self.broker, request).await
    }

    async fn delete_bucket(
        &self,
        request: Request<pb::DeleteBucketRequest>,
    ) -> Result<Response<pb::DeleteBucketResponse>, Status> {
        super::buckets::delete_bucket(&self.broker, request).await
    }

    async fn list_cooldowns(
        &self,
        request: Request<pb::ListCooldownsRequest>,
    ) -> Result<Response<pb::ListCooldownsResponse>, Status> {
        super::buckets::list_cooldowns(&self.broker, request).await
    }

    async fn lift_cooldown(
        &self,
        request: Request<pb::LiftCooldownRequest>,
    ) -> Result<Response<pb::LiftCooldownResponse>, Status> {
        super::buckets::lift_cooldown(&self.broker, request).await
    }
}
