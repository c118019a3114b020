//! Flow admin calls: task events, the watch stream, bulk cancel/requeue.

use crate::{Client, Error, pb};

impl Client {
    /// One task's recorded events, oldest first (every page).
    pub async fn list_task_events(&self, task_id: &str) -> Result<Vec<pb::TaskEvent>, Error> {
        let mut out = Vec::new();
        let mut page_token = String::new();
        loop {
            let req = pb::ListTaskEventsRequest {
                task_id: task_id.to_string(),
                page_size: 1000,
                page_token,
            };
            let page = self
                .admin_stub()
                .list_task_events(self.request(req))
                .await?
                .into_inner();
            out.extend(page.events);
            if page.next_page_token.is_empty() {
                return Ok(out);
            }
            page_token = page.next_page_token;
        }
    }

    /// Opens a WatchTasks stream. When this returns, every matching event recorded
    /// from now on (or after `req.after_event_id`) will arrive on it.
    pub async fn watch_tasks(
        &self,
        req: pb::WatchTasksRequest,
    ) -> Result<tonic::Streaming<pb::WatchTasksResponse>, Error> {
        let mut request = tonic::Request::new(req);
        if let Some(auth) = self.request(()).metadata().get("authorization") {
            request.metadata_mut().insert("authorization", auth.clone());
        }
        Ok(self.admin_stub().watch_tasks(request).await?.into_inner())
    }

    /// Cancels the tasks a filter selects (or counts them, with `dry_run`).
    pub async fn cancel_tasks(
        &self,
        req: pb::CancelTasksRequest,
    ) -> Result<pb::CancelTasksResponse, Error> {
        Ok(self
            .admin_stub()
            .cancel_tasks(self.request(req))
            .await?
            .into_inner())
    }

    /// Requeues the DEAD or CANCELLED tasks a filter selects, optionally spread at
    /// `rate_per_second` (or counts them, with `dry_run`).
    pub async fn requeue_tasks(
        &self,
        req: pb::RequeueTasksRequest,
    ) -> Result<pb::RequeueTasksResponse, Error> {
        Ok(self
            .admin_stub()
            .requeue_tasks(self.request(req))
            .await?
            .into_inner())
    }
}
