//! Operator calls on `Client`: read, list (as a stream over all pages), cancel,
//! update, requeue, attempts and queue statistics. They return the generated
//! messages (`pb::Task`, `pb::Attempt`, `pb::QueueStats`) as they are.

use std::time::SystemTime;

use futures::Stream;

use crate::pb::{self, TaskState};
use crate::time::to_proto_timestamp;
use crate::{Client, Error};

/// Which tasks `Client::list_tasks` returns; empty means all of them.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    inner: pb::ListTasksRequest,
}

impl TaskFilter {
    pub fn new() -> Self {
        TaskFilter::default()
    }

    /// Only this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.inner.queue = queue.into();
        self
    }

    /// Only the copies of this fan-out group (the first copy's id).
    pub fn fanout_group(mut self, group: impl Into<String>) -> Self {
        self.inner.fanout_group = group.into();
        self
    }

    /// Only tasks in this state; call again to add more states.
    pub fn state(mut self, state: TaskState) -> Self {
        self.inner.states.push(state as i32);
        self
    }

    /// Only tasks with this key.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.inner.key = key.into();
        self
    }

    /// Only tasks last leased by this worker.
    pub fn worker_id(mut self, worker_id: impl Into<String>) -> Self {
        self.inner.worker_id = worker_id.into();
        self
    }

    /// Only tasks whose target names this worker.
    pub fn target_worker(mut self, worker_id: impl Into<String>) -> Self {
        self.inner.target_worker_id = worker_id.into();
        self
    }

    /// Only tasks whose target labels include this pair; call again to require more.
    pub fn target_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.inner.target_labels.insert(key.into(), value.into());
        self
    }

    /// Only tasks whose metadata has this key (with any value).
    pub fn metadata_key(mut self, key: impl Into<String>) -> Self {
        self.inner.metadata_key = key.into();
        self
    }

    /// Only tasks whose metadata maps `key` to `value`.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.inner.metadata_key = key.into();
        self.inner.metadata_value = value.into();
        self
    }

    /// Only tasks created at or after `t`.
    pub fn created_after(mut self, t: impl Into<SystemTime>) -> Self {
        self.inner.created_after = Some(to_proto_timestamp(t.into()));
        self
    }

    /// Only tasks created before `t`.
    pub fn created_before(mut self, t: impl Into<SystemTime>) -> Self {
        self.inner.created_before = Some(to_proto_timestamp(t.into()));
        self
    }

    /// Only tasks made by this schedule.
    pub fn schedule_id(mut self, id: impl Into<String>) -> Self {
        self.inner.schedule_id = id.into();
        self
    }

    /// Tasks per call, 1 to 1000. Default: the broker's (100).
    pub fn page_size(mut self, n: i32) -> Self {
        self.inner.page_size = n;
        self
    }
}

/// The changes `Client::update_task` makes to a task that is not leased; only the
/// fields set here are sent in the update mask.
#[derive(Debug, Clone)]
pub struct TaskUpdate {
    inner: pb::UpdateTaskRequest,
    paths: Vec<String>,
}

impl TaskUpdate {
    pub fn new(task_id: impl Into<String>) -> Self {
        TaskUpdate {
            inner: pb::UpdateTaskRequest {
                task_id: task_id.into(),
                ..Default::default()
            },
            paths: Vec::new(),
        }
    }

    fn path(&mut self, name: &str) {
        if !self.paths.iter().any(|p| p == name) {
            self.paths.push(name.to_string());
        }
    }

    /// Not leased before `t`.
    pub fn run_at(mut self, t: impl Into<SystemTime>) -> Self {
        self.inner.run_at = Some(to_proto_timestamp(t.into()));
        self.path("run_at");
        self
    }

    pub fn priority(mut self, priority: i32) -> Self {
        self.inner.priority = priority;
        self.path("priority");
        self
    }

    /// A new deadline, or `None` to clear it.
    pub fn deadline(mut self, t: Option<SystemTime>) -> Self {
        self.inner.deadline = t.map(to_proto_timestamp);
        self.path("deadline");
        self
    }

    pub fn max_attempts(mut self, n: u32) -> Self {
        self.inner.max_attempts = n;
        self.path("max_attempts");
        self
    }

    /// Only the worker with this id may lease the task (it must be waiting).
    pub fn target_worker(mut self, worker_id: impl Into<String>) -> Self {
        self.inner
            .target
            .get_or_insert_with(Default::default)
            .worker_id = worker_id.into();
        self.path("target");
        self
    }

    /// Only a worker whose labels include this pair (and every other one given)
    /// may lease the task (it must be waiting).
    pub fn target_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.inner
            .target
            .get_or_insert_with(Default::default)
            .labels
            .insert(key.into(), value.into());
        self.path("target");
        self
    }

    /// Any worker may lease the task: its target is cleared.
    pub fn clear_target(mut self) -> Self {
        self.inner.target = None;
        self.path("target");
        self
    }

    fn into_proto(mut self) -> pb::UpdateTaskRequest {
        self.inner.update_mask = Some(prost_types::FieldMask { paths: self.paths });
        self.inner
    }
}

fn task(t: Option<pb::Task>) -> Result<pb::Task, Error> {
    t.ok_or(Error::Malformed("task"))
}

impl Client {
    /// One task, with its payload, result and checkpoint.
    pub async fn get_task(&self, task_id: &str) -> Result<pb::Task, Error> {
        let req = pb::GetTaskRequest {
            task_id: task_id.to_string(),
        };
        task(
            self.admin_stub()
                .get_task(self.request(req))
                .await?
                .into_inner()
                .task,
        )
    }

    /// One page of tasks, newest first, and the token of the next page (empty on the
    /// last page).
    pub async fn list_tasks_page(
        &self,
        filter: &TaskFilter,
        page_token: &str,
    ) -> Result<(Vec<pb::Task>, String), Error> {
        let mut req = filter.inner.clone();
        req.page_token = page_token.to_string();
        let r = self
            .admin_stub()
            .list_tasks(self.request(req))
            .await?
            .into_inner();
        Ok((r.tasks, r.next_page_token))
    }

    /// Every task matching `filter`, newest first, fetched a page at a time as the
    /// stream is read. Stop reading (`take`, drop) to stop fetching.
    pub fn list_tasks(
        &self,
        filter: TaskFilter,
    ) -> impl Stream<Item = Result<pb::Task, Error>> + Send + 'static {
        use futures::{StreamExt, TryStreamExt};
        struct Pager {
            client: Client,
            filter: TaskFilter,
            token: Option<String>,
        }
        let start = Pager {
            client: self.clone(),
            filter,
            token: Some(String::new()),
        };
        futures::stream::try_unfold(start, |mut p| async move {
            let Some(token) = p.token.take() else {
                return Ok::<_, Error>(None);
            };
            let (tasks, next) = p.client.list_tasks_page(&p.filter, &token).await?;
            p.token = (!next.is_empty()).then_some(next);
            Ok(Some((futures::stream::iter(tasks.into_iter().map(Ok)), p)))
        })
        .try_flatten()
        .boxed()
    }

    /// SCHEDULED or READY: CANCELLED at once. LEASED: marked `cancel_requested`; the
    /// worker is told on its next Heartbeat.
    pub async fn cancel_task(&self, task_id: &str) -> Result<pb::Task, Error> {
        let req = pb::CancelTaskRequest {
            task_id: task_id.to_string(),
        };
        task(
            self.admin_stub()
                .cancel_task(self.request(req))
                .await?
                .into_inner()
                .task,
        )
    }

    /// Changes run_at, priority, deadline or max_attempts of a task that is not leased.
    pub async fn update_task(&self, update: TaskUpdate) -> Result<pb::Task, Error> {
        let req = update.into_proto();
        task(
            self.admin_stub()
                .update_task(self.request(req))
                .await?
                .into_inner()
                .task,
        )
    }

    /// DEAD or CANCELLED: READY again, with a fresh budget of attempts.
    pub async fn requeue_task(&self, task_id: &str) -> Result<pb::Task, Error> {
        let req = pb::RequeueTaskRequest {
            task_id: task_id.to_string(),
        };
        task(
            self.admin_stub()
                .requeue_task(self.request(req))
                .await?
                .into_inner()
                .task,
        )
    }

    /// Every attempt of a task, oldest first.
    pub async fn list_attempts(&self, task_id: &str) -> Result<Vec<pb::Attempt>, Error> {
        let req = pb::ListAttemptsRequest {
            task_id: task_id.to_string(),
        };
        Ok(self
            .admin_stub()
            .list_attempts(self.request(req))
            .await?
            .into_inner()
            .attempts)
    }

    /// Counts per state and recent throughput of `queues`, or of every queue with
    /// tasks when `queues` is empty.
    pub async fn queue_stats(&self, queues: &[String]) -> Result<Vec<pb::QueueStats>, Error> {
        let req = pb::GetQueueStatsRequest {
            queues: queues.to_vec(),
        };
        Ok(self
            .admin_stub()
            .get_queue_stats(self.request(req))
            .await?
            .into_inner()
            .queues)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_mask_names_each_set_field_once() {
        let req = TaskUpdate::new("t1")
            .priority(3)
            .priority(4)
            .deadline(None)
            .into_proto();
        assert_eq!(req.priority, 4);
        assert_eq!(req.update_mask.unwrap().paths, ["priority", "deadline"]);
    }

    #[test]
    fn filters_accumulate_states() {
        let f = TaskFilter::new()
            .queue("q")
            .state(TaskState::Ready)
            .state(TaskState::Leased);
        assert_eq!(
            f.inner.states,
            [TaskState::Ready as i32, TaskState::Leased as i32]
        );
    }
}
