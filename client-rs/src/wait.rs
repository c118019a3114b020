//! Waiting for a task's outcome: the "call it like a local function" path. It
//! follows the task on AdminService.WatchTasks (Flow): the stream is opened
//! first, then the task is read once, so an outcome that comes before or after the
//! stream opened is seen either way. A broker without WatchTasks is polled with
//! GetTask at a growing interval (25 ms up to 1 s).

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::pb::TaskState;
use crate::{Client, Error, TaskSpec};

const FIRST_POLL: Duration = Duration::from_millis(25);
const MAX_POLL: Duration = Duration::from_secs(1);

/// The next polling interval: x1.5, at most `MAX_POLL`.
fn next_interval(d: Duration) -> Duration {
    (d * 3 / 2).min(MAX_POLL)
}

impl Client {
    /// Waits up to `timeout` for the task to finish. SUCCEEDED gives its result bytes;
    /// DEAD or CANCELLED give `Error::TaskFailed` with the task's last error; running
    /// out of time gives `Error::Timeout` (the task itself carries on).
    pub async fn wait(&self, task_id: &str, timeout: Duration) -> Result<Vec<u8>, Error> {
        let give_up = Instant::now() + timeout;
        match tokio::time::timeout_at(give_up, self.wait_by_watch(task_id)).await {
            Ok(Ok(Some(outcome))) => outcome,
            // The broker has no WatchTasks, or the stream broke: poll instead.
            Ok(Ok(None)) | Ok(Err(_)) => self.wait_by_polling(task_id, give_up, timeout).await,
            Err(_) => {
                let state = self
                    .get_task(task_id)
                    .await
                    .map(|t| t.state())
                    .unwrap_or(TaskState::Unspecified);
                Err(Error::Timeout {
                    task_id: task_id.to_string(),
                    waited: timeout,
                    state,
                })
            }
        }
    }

    /// The outcome of a finished task, `None` while it runs.
    fn outcome(task_id: &str, task: crate::pb::Task) -> Option<Result<Vec<u8>, Error>> {
        match task.state() {
            TaskState::Succeeded => Some(Ok(task.result)),
            s @ (TaskState::Dead | TaskState::Cancelled) => Some(Err(Error::TaskFailed {
                task_id: task_id.to_string(),
                state: s,
                error: task.last_error,
            })),
            _ => None,
        }
    }

    /// Follows the task on WatchTasks until it finishes (resuming after the last
    /// event when the stream drops). `Ok(None)`: the broker has no WatchTasks.
    async fn wait_by_watch(&self, task_id: &str) -> Result<Option<Result<Vec<u8>, Error>>, Error> {
        use crate::pb::TaskEventKind as K;
        let mut after = 0u64;
        loop {
            let req = crate::pb::WatchTasksRequest {
                task_ids: vec![task_id.to_string()],
                kinds: vec![K::Succeeded as i32, K::Dead as i32, K::Cancelled as i32],
                after_event_id: after,
                ..Default::default()
            };
            let mut events = match self.watch_tasks(req).await {
                Ok(s) => s,
                Err(e) if e.code() == Some(tonic::Code::Unimplemented) => return Ok(None),
                Err(e) if e.is_transient() => {
                    tokio::time::sleep(FIRST_POLL).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            // Opened: whatever happens from now on arrives on the stream.
            if let Some(outcome) = Self::outcome(task_id, self.get_task(task_id).await?) {
                return Ok(Some(outcome));
            }
            // Until the stream drops; then resume after the last event seen.
            loop {
                match events.message().await {
                    Ok(Some(m)) => {
                        if let Some(last) = m.events.last() {
                            after = last.event_id;
                            if let Some(o) = Self::outcome(task_id, self.get_task(task_id).await?) {
                                return Ok(Some(o));
                            }
                        }
                    }
                    // A clean end or a dropped connection: open the watch again, after a
                    // pause so a broker that keeps ending streams is not hammered.
                    Ok(None) => break,
                    Err(status) => {
                        let e = Error::from(status);
                        if !e.is_transient() {
                            return Err(e);
                        }
                        break;
                    }
                }
            }
            tokio::time::sleep(FIRST_POLL).await;
        }
    }

    async fn wait_by_polling(
        &self,
        task_id: &str,
        give_up: Instant,
        timeout: Duration,
    ) -> Result<Vec<u8>, Error> {
        let mut interval = FIRST_POLL;
        loop {
            let state = match self.get_task(task_id).await {
                Ok(task) => match task.state() {
                    TaskState::Succeeded => return Ok(task.result),
                    s @ (TaskState::Dead | TaskState::Cancelled) => {
                        return Err(Error::TaskFailed {
                            task_id: task_id.to_string(),
                            state: s,
                            error: task.last_error,
                        });
                    }
                    s => s,
                },
                // A broker restart or a network blip is not the task's outcome.
                Err(e) if e.is_transient() => TaskState::Unspecified,
                Err(e) => return Err(e),
            };
            let now = Instant::now();
            if now >= give_up {
                return Err(Error::Timeout {
                    task_id: task_id.to_string(),
                    waited: timeout,
                    state,
                });
            }
            tokio::time::sleep(interval.min(give_up - now)).await;
            interval = next_interval(interval);
        }
    }

    /// Submits `spec` and waits up to `timeout` for its result, as [`Client::wait`].
    pub async fn submit_and_wait(
        &self,
        spec: TaskSpec,
        timeout: Duration,
    ) -> Result<Vec<u8>, Error> {
        let submitted = self.submit(spec).await?;
        self.wait(&submitted.task_id, timeout).await
    }

    /// Submits the JSON of `value` to `queue` and decodes the JSON result as `R`.
    pub async fn submit_and_wait_json<T, R>(
        &self,
        queue: impl Into<String>,
        value: &T,
        timeout: Duration,
    ) -> Result<R, Error>
    where
        T: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let bytes = self
            .submit_and_wait(TaskSpec::json(queue, value)?, timeout)
            .await?;
        serde_json::from_slice(&bytes).map_err(Error::Decode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_that_ended_dead_or_cancelled_is_task_failed() {
        for (state, name) in [
            (TaskState::Dead, "DEAD"),
            (TaskState::Cancelled, "CANCELLED"),
        ] {
            let task = crate::pb::Task {
                id: "t1".into(),
                state: state as i32,
                last_error: "no such order".into(),
                ..Default::default()
            };
            let Some(Err(e)) = Client::outcome("t1", task) else {
                panic!("{name}: not a failure");
            };
            assert_eq!(
                e.to_string(),
                format!("task t1 ended {name}: no such order")
            );
            match e {
                Error::TaskFailed {
                    task_id,
                    state: s,
                    error,
                } => assert_eq!(
                    (task_id.as_str(), s, error.as_str()),
                    ("t1", state, "no such order")
                ),
                other => panic!("{name}: {other:?}"),
            }
        }
        let done = crate::pb::Task {
            id: "t2".into(),
            state: TaskState::Succeeded as i32,
            result: b"r".to_vec(),
            ..Default::default()
        };
        assert!(matches!(Client::outcome("t2", done), Some(Ok(r)) if r == b"r"));
        let running = crate::pb::Task {
            id: "t3".into(),
            state: TaskState::Leased as i32,
            ..Default::default()
        };
        assert!(Client::outcome("t3", running).is_none());
    }

    #[test]
    fn polling_interval_grows_and_is_bounded() {
        let mut d = FIRST_POLL;
        let mut last = Duration::ZERO;
        for _ in 0..50 {
            assert!(d >= last && d <= MAX_POLL);
            last = d;
            d = next_interval(d);
        }
        assert_eq!(d, MAX_POLL);
    }
}
