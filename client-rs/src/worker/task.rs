//! One attempt of one task: run the handler (a panic is caught and becomes a
//! failure), then report Complete or Fail, retrying the report while the lease
//! still holds (until `SETTLE_MARGIN` before it runs out). Both reports are
//! idempotent on the broker, so a retry after a lost answer is harmless. The lease
//! is watched by this process's clock too: when it runs out without an extension,
//! the handler is told at once, whether or not the broker answers.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{OwnedSemaphorePermit, broadcast};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::TaskContext;
use super::context::Shared;
use super::event::{Outcome, WorkerEvent};
use super::handler::{BoxHandler, TaskError};
use super::heartbeat::Leases;
use super::metrics::{Kind, Rpc};
use crate::time::to_proto_duration;
use crate::{Client, Error, pb};

/// The message of the Fail a worker sends for a handler cut off by shutdown.
pub(crate) const SHUTDOWN_MESSAGE: &str = "worker stopped";

/// How a handler's run ended.
enum Ended {
    Returned(Result<Vec<u8>, TaskError>),
    Panicked(String),
    /// Cut off at the end of the shutdown grace period.
    Stopped,
}

/// What to tell the broker.
enum Report {
    Complete(Vec<u8>),
    Fail {
        message: String,
        non_retryable: bool,
        retry_after: Option<Duration>,
        prefer_same_worker: bool,
        cooldown: Option<(pb::CooldownScope, Duration)>,
    },
}

/// Everything one attempt needs; moved into its tokio task.
pub(crate) struct Attempt {
    pub(crate) shared: Arc<Shared>,
    pub(crate) handler: BoxHandler,
    pub(crate) client: Client,
    /// Shares Complete calls with the worker's other attempts.
    pub(crate) completer: super::complete::Completer,
    pub(crate) metrics: super::metrics::Metrics,
    pub(crate) leases: Arc<Leases>,
    pub(crate) hard_stop: CancellationToken,
    pub(crate) events: broadcast::Sender<WorkerEvent>,
    /// The slot this attempt occupies; freed when the attempt is over.
    pub(crate) permit: OwnedSemaphorePermit,
    /// lease_next: asking for, and starting, the slot's next task.
    pub(crate) chain: super::next::Chain,
    pub(crate) next: super::next::Next,
}

/// Logs the error a handler returned (docs/client-spec.md point 11, Logging), one line:
/// a planned retry (retryable, attempts left) and a permanent failure (`TaskError::permanent`,
/// or the last of `max_attempts`: the task goes DEAD) at WARN; a result that cannot be stored
/// (a programming error) at ERROR. A panic is logged at ERROR where it is caught.
fn log_failure(task: &pb::LeasedTask, e: &TaskError) {
    let (task_id, attempt, max_attempts) = (&task.task_id, task.attempt, task.max_attempts);
    if e.unstorable {
        tracing::error!(%task_id, attempt, error = %e.message(), "handler result cannot be stored");
    } else if !e.is_retryable() {
        tracing::warn!(%task_id, attempt, error = %e.message(), "handler failed permanently; the task goes DEAD");
    } else if max_attempts > 0 && attempt >= max_attempts {
        tracing::warn!(%task_id, attempt, max_attempts, error = %e.message(), "handler failed on its last attempt; the task goes DEAD");
    } else {
        tracing::warn!(%task_id, attempt, max_attempts, error = %e.message(), "handler failed; the task will be retried");
    }
}

pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_string()
    }
}

impl Attempt {
    /// Runs the task, then each task its settle leased next for this slot (issue
    /// 17); the slot is freed when a settle brings none.
    pub(crate) async fn run(mut self) {
        loop {
            self.run_one().await;
            let Some((task, sent_at)) = self.next.take() else {
                break;
            };
            let Some((shared, handler)) = self.chain.begin(task, sent_at) else {
                break;
            };
            self.leases.insert(shared.clone());
            self.shared = shared;
            self.handler = handler;
        }
        drop(self.permit);
    }

    async fn run_one(&self) {
        let task_id = self.shared.task.task_id.clone();
        let ctx = TaskContext {
            shared: self.shared.clone(),
        };
        let handler = self.handler.clone();
        let task = &self.shared.task;
        let span =
            crate::trace::process_span(&task.queue, &task.task_id, task.attempt, &task.metadata);
        // The producer's context is also the current OpenTelemetry context while the
        // handler runs, for code that reads `opentelemetry::Context::current()`.
        let otel_cx = crate::trace::task_context(&task.metadata);
        // The handler is called inside the future, so a panic in the call itself is
        // caught as well as one in the future it returns.
        let run = AssertUnwindSafe(opentelemetry::context::FutureExt::with_context(
            tracing::Instrument::instrument(async move { handler(ctx).await }, span.clone()),
            otel_cx,
        ))
        .catch_unwind();
        // The task's deadline cancels the handler (spec point 4).
        let deadline = crate::time::from_proto_timestamp(task.deadline.as_ref()).map(|d| {
            let left = d
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default();
            let shared = self.shared.clone();
            tokio::spawn(async move {
                tokio::time::sleep(left).await;
                shared.cancel(crate::CancelReason::Deadline);
            })
        });
        // The lease by this process's clock (docs/client-spec.md point 11): when it
        // runs out without an extension, the lease is lost, broker answer or not.
        let expiry = {
            let shared = self.shared.clone();
            tokio::spawn(async move {
                loop {
                    let until = shared.valid_until();
                    if Instant::now() >= until {
                        shared.lose("it ran out by the worker's clock without an extension");
                        return;
                    }
                    tokio::time::sleep_until(until).await;
                }
            })
        };
        let began = Instant::now();
        let ended = tokio::select! {
            // A handler that is done wins over a shutdown that fires at the same time.
            biased;
            r = run => match r {
                Ok(r) => Ended::Returned(r),
                Err(payload) => Ended::Panicked(panic_message(payload.as_ref())),
            },
            _ = self.hard_stop.cancelled() => Ended::Stopped,
        };
        if let Some(timer) = deadline {
            timer.abort();
        }
        match &ended {
            Ended::Returned(Err(e)) => {
                let kind = if e.is_retryable() {
                    "retryable"
                } else {
                    "permanent"
                };
                crate::trace::record_process_error(&span, kind, e.message());
            }
            Ended::Panicked(msg) => crate::trace::record_process_error(&span, "panic", msg),
            Ended::Returned(Ok(_)) | Ended::Stopped => {}
        }
        let ran_for = began.elapsed().as_secs_f64();
        let outcome = self.settle(ended).await;
        let kind = match &outcome {
            Outcome::Completed => Kind::Succeeded,
            Outcome::Abandoned => Kind::LeaseLost,
            Outcome::Interrupted => Kind::Cancelled,
            Outcome::Failed { .. } | Outcome::Unreported { .. } => Kind::Failed,
        };
        self.metrics.task(&self.shared.task.queue, kind, ran_for);
        expiry.abort();
        self.leases.remove(&task_id);
        let _ = self.events.send(WorkerEvent::Finished { task_id, outcome });
    }

    /// Whether a settle now may ask for the next task: not once the worker stops.
    fn lease_next(&self) -> Option<pb::LeaseRequest> {
        if self.hard_stop.is_cancelled() {
            return None;
        }
        self.chain.lease_next()
    }

    async fn settle(&self, ended: Ended) -> Outcome {
        self.shared.start_settling();
        if self.shared.is_lost() {
            // The broker reclaimed the task; whatever we say now is stale.
            return Outcome::Abandoned;
        }
        let (report, success) = match ended {
            Ended::Returned(Ok(result)) => (Report::Complete(result), Outcome::Completed),
            // Cut off by the stop: whatever it failed with, the task is handed back.
            Ended::Returned(Err(_))
                if self.shared.cancel_reason() == Some(crate::CancelReason::ShuttingDown) =>
            {
                tracing::warn!(task_id = %self.shared.task.task_id, "handler failed after the stop timeout; task handed back");
                (Report::hand_back(), Outcome::Interrupted)
            }
            Ended::Returned(Err(e)) => {
                log_failure(&self.shared.task, &e);
                let success = Outcome::Failed {
                    message: e.message().to_string(),
                    retryable: e.is_retryable(),
                };
                let report = Report::Fail {
                    message: e.message().to_string(),
                    non_retryable: !e.is_retryable(),
                    retry_after: e.retry_delay(),
                    prefer_same_worker: e.prefers_same_worker(),
                    cooldown: e.cooldown(),
                };
                (report, success)
            }
            Ended::Panicked(msg) => {
                let message = format!("panic: {msg}");
                tracing::error!(task_id = %self.shared.task.task_id, %message, "handler panicked");
                let success = Outcome::Failed {
                    message: message.clone(),
                    retryable: true,
                };
                let report = Report::Fail {
                    message,
                    non_retryable: false,
                    retry_after: None,
                    prefer_same_worker: false,
                    cooldown: None,
                };
                (report, success)
            }
            Ended::Stopped => {
                tracing::warn!(task_id = %self.shared.task.task_id, "handler still running at the stop timeout; task handed back");
                (Report::hand_back(), Outcome::Interrupted)
            }
        };
        match self.report(report).await {
            Ok(()) => success,
            Err(e) if e.is_lease_lost() => {
                self.shared.lose("the settle was answered LEASE_LOST");
                Outcome::Abandoned
            }
            Err(_) if self.shared.is_lost() => Outcome::Abandoned,
            Err(e) => {
                tracing::warn!(task_id = %self.shared.task.task_id, error = %e, "could not report the outcome");
                Outcome::Unreported {
                    error: e.to_string(),
                }
            }
        }
    }

    async fn report(&self, report: Report) -> Result<(), Error> {
        match report {
            Report::Complete(result) => match self.retrying(|| self.complete(result.clone())).await
            {
                // A result the broker refuses (too large) would be refused again:
                // fail the task for good with the reason instead of leaving it leased.
                Err(e) if e.code() == Some(tonic::Code::ResourceExhausted) => {
                    let message = format!("result refused by the broker: {e}");
                    self.retrying(|| self.fail(message.clone(), true, None, false, None))
                        .await
                }
                other => other,
            },
            Report::Fail {
                message,
                non_retryable,
                retry_after,
                prefer_same_worker,
                cooldown,
            } => {
                self.retrying(|| {
                    self.fail(
                        message.clone(),
                        non_retryable,
                        retry_after,
                        prefer_same_worker,
                        cooldown,
                    )
                })
                .await
            }
        }
    }

    async fn complete(&self, result: Vec<u8>) -> Result<(), Error> {
        let req = pb::CompleteRequest {
            task_id: self.shared.task.task_id.clone(),
            lease_token: self.shared.task.lease_token.clone(),
            result,
            lease_next: self.lease_next(),
        };
        let sent_at = Instant::now();
        let settled = self.completer.complete(req).await;
        self.next.keep(settled.next, sent_at);
        settled.result
    }

    async fn fail(
        &self,
        message: String,
        non_retryable: bool,
        retry_after: Option<Duration>,
        prefer_same_worker: bool,
        cooldown: Option<(pb::CooldownScope, Duration)>,
    ) -> Result<(), Error> {
        let req = pb::FailRequest {
            task_id: self.shared.task.task_id.clone(),
            lease_token: self.shared.task.lease_token.clone(),
            error_message: message,
            non_retryable,
            retry_after: retry_after.map(to_proto_duration),
            prefer_same_worker,
            // None for a task handed back at shutdown (hard_stop is cancelled).
            lease_next: self.lease_next(),
            cooldown: cooldown.map(|(scope, d)| pb::Cooldown {
                scope: scope as i32,
                duration: Some(to_proto_duration(d)),
            }),
        };
        let sent_at = Instant::now();
        self.metrics.settle_call(Rpc::Fail);
        let out = self.client.fail(req).await?;
        self.next.keep(out.next_tasks, sent_at);
        Ok(())
    }

    /// Calls `call` until it succeeds, fails for a reason a retry cannot fix, or
    /// the lease (as this worker last knew it) has run out.
    async fn retrying<F, Fut>(&self, call: F) -> Result<(), Error>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<(), Error>>,
    {
        let mut attempt = 0;
        loop {
            match call().await {
                Ok(()) => return Ok(()),
                Err(e) if e.is_transient() => {
                    let pause = super::backoff(attempt, REPORT_BACKOFF_BASE, REPORT_BACKOFF_MAX);
                    if self.shared.is_lost()
                        || Instant::now() + pause + SETTLE_MARGIN >= self.shared.valid_until()
                    {
                        return Err(e);
                    }
                    tracing::warn!(task_id = %self.shared.task.task_id, error = %e, ?pause, "settle failed; retrying");
                    self.metrics.settle_retry(&self.shared.task.queue);
                    tokio::time::sleep(pause).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// A settle is not retried when the retry would start within this of the lease's
/// expiry (docs/client-spec.md point 11).
pub(crate) const SETTLE_MARGIN: Duration = Duration::from_secs(1);

impl Report {
    /// The Fail that hands a task back at stop: retryable, `retry_after` 0, so it is
    /// READY at once for another worker.
    fn hand_back() -> Self {
        Report::Fail {
            message: SHUTDOWN_MESSAGE.to_string(),
            non_retryable: false,
            retry_after: Some(Duration::ZERO),
            prefer_same_worker: false,
            cooldown: None,
        }
    }
}

const REPORT_BACKOFF_BASE: Duration = Duration::from_millis(100);
const REPORT_BACKOFF_MAX: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::{Json, TaskOutput};

    /// The lines `f` logs, formatted without colours.
    fn logged(f: impl FnOnce()) -> Vec<String> {
        use std::sync::Mutex;
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_string).collect()
    }

    fn leased(attempt: u32, max_attempts: u32) -> pb::LeasedTask {
        pb::LeasedTask {
            task_id: "t1".into(),
            attempt,
            max_attempts,
            ..Default::default()
        }
    }

    #[test]
    fn returned_errors_are_logged_at_warn_in_one_line() {
        let cases = [
            (
                leased(1, 3),
                TaskError::retry("backend busy"),
                "WARN",
                "the task will be retried",
            ),
            (
                leased(3, 3),
                TaskError::retry("backend busy"),
                "WARN",
                "on its last attempt; the task goes DEAD",
            ),
            (
                leased(1, 3),
                TaskError::permanent("no such order"),
                "WARN",
                "failed permanently; the task goes DEAD",
            ),
        ];
        for (task, e, level, what) in cases {
            let lines = logged(|| log_failure(&task, &e));
            assert_eq!(lines.len(), 1, "{lines:?}");
            let line = &lines[0];
            assert!(line.trim_start().starts_with(level), "{line}");
            assert!(line.contains(what) && line.contains("task_id=t1"), "{line}");
            assert!(line.contains(e.message()), "{line}");
        }
        // A result that cannot be stored is a programming error: ERROR.
        let unstorable = Json(std::collections::HashMap::from([((1, 2), 3)]))
            .into_result()
            .unwrap_err();
        let lines = logged(|| log_failure(&leased(1, 3), &unstorable));
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].trim_start().starts_with("ERROR"), "{}", lines[0]);
        assert!(
            lines[0].contains("cannot encode the result as JSON"),
            "{}",
            lines[0]
        );
    }

    #[test]
    fn panic_payloads_become_messages() {
        assert_eq!(panic_message(&"boom"), "boom");
        assert_eq!(panic_message(&String::from("boom 2")), "boom 2");
        assert_eq!(panic_message(&42_u8), "a non-string panic payload");
    }
}
