//! Submit: one task or a batch, traced, retried while a full queue hints a delay.

use std::time::Duration;

use serde::Serialize;

use super::Client;
use crate::{Error, TaskSpec, pb};

/// The outcome of one submitted task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    pub task_id: String,
    /// True when a task with the same (queue, key) already existed; nothing was created.
    pub deduplicated: bool,
    /// A fan-out task's copies (the first is `task_id`); empty otherwise.
    pub copy_task_ids: Vec<String>,
    /// The existing waiting task took this submission's payload, run_at,
    /// priority and metadata (DUPLICATE_KEY_POLICY_REPLACE_WAITING).
    pub replaced: bool,
}

/// Tries of a Submit refused by a full queue, the first included.
pub const SUBMIT_FULL_TRIES: u32 = 5;
/// The longest wait between them, whatever the broker hints.
pub const SUBMIT_FULL_MAX_DELAY: Duration = Duration::from_secs(10);

/// The wait a full queue's refusal hints (RESOURCE_EXHAUSTED with a
/// `google.rpc.RetryInfo`), capped; `None` for any other error, or a refusal
/// without a hint (a call that can never fit).
pub fn full_queue_delay(status: &tonic::Status) -> Option<Duration> {
    use tonic_types::StatusExt;
    if status.code() != tonic::Code::ResourceExhausted {
        return None;
    }
    let delay = status.get_details_retry_info()?.retry_delay?;
    Some(delay.min(SUBMIT_FULL_MAX_DELAY))
}

impl Client {
    /// Enqueues one task.
    pub async fn submit(&self, spec: TaskSpec) -> Result<Submitted, Error> {
        let mut results = self.submit_many([spec]).await?;
        results
            .pop()
            .ok_or(Error::Malformed("SubmitResponse.results"))
    }

    /// Enqueues 1 to 1000 tasks at once; the broker validates them all or none.
    /// The results are in the order of `specs`.
    pub async fn submit_many(
        &self,
        specs: impl IntoIterator<Item = TaskSpec>,
    ) -> Result<Vec<Submitted>, Error> {
        let mut tasks: Vec<pb::TaskSpec> = specs.into_iter().map(Into::into).collect();
        self.retry_defaults.apply(&mut tasks);
        let n = tasks.len();
        let queue = tasks.first().map(|t| t.queue.clone()).unwrap_or_default();
        let span = tracing::info_span!(
            "send",
            otel.name = %format!("send {queue}"),
            otel.kind = "producer",
            messaging.system = "taskbroker",
            messaging.operation.type = "send",
            messaging.operation.name = "submit",
            messaging.destination.name = %queue,
            messaging.batch.message_count = n,
            messaging.message.id = tracing::field::Empty,
        );
        // The trace context travels with each task to its worker (spec point 7): the same
        // value as the call's header, so a tracing broker can put its `create` span between.
        if let Some(tp) = span.in_scope(crate::trace::current_traceparent) {
            for t in &mut tasks {
                t.metadata
                    .entry(crate::trace::TRACEPARENT.to_string())
                    .or_insert_with(|| tp.clone());
            }
        }
        // A full queue (RESOURCE_EXHAUSTED with a RetryInfo) stored nothing:
        // the call is tried again after the hinted delay, a bounded number of
        // times (docs/client-spec.md, point 18).
        let call = async {
            let mut tries = 1;
            loop {
                let answer = self
                    .broker
                    .clone()
                    .submit(self.request(pb::SubmitRequest {
                        tasks: tasks.clone(),
                    }))
                    .await;
                match answer {
                    Err(status) if tries < SUBMIT_FULL_TRIES => match full_queue_delay(&status) {
                        Some(delay) => {
                            tracing::warn!(
                                delay = ?delay,
                                message = status.message(),
                                "submit refused by a full queue; retrying"
                            );
                            tokio::time::sleep(delay).await;
                            tries += 1;
                        }
                        None => return Err(status),
                    },
                    other => return other,
                }
            }
        };
        let response = tracing::Instrument::instrument(call, span.clone())
            .await?
            .into_inner();
        if response.results.len() != n {
            return Err(Error::Malformed("SubmitResponse.results"));
        }
        if let [one] = response.results.as_slice() {
            span.record("messaging.message.id", one.task_id.as_str());
        }
        sent_messages(&queue, n);
        Ok(response
            .results
            .into_iter()
            .map(|r| Submitted {
                task_id: r.task_id,
                deduplicated: r.deduplicated,
                copy_task_ids: r.copy_task_ids,
                replaced: r.replaced,
            })
            .collect())
    }

    /// Enqueues one task whose payload is the JSON of `value`, with default settings.
    pub async fn submit_json<T: Serialize + ?Sized>(
        &self,
        queue: impl Into<String>,
        value: &T,
    ) -> Result<Submitted, Error> {
        self.submit(TaskSpec::json(queue, value)?).await
    }
}

/// `messaging.client.sent.messages` (the OpenTelemetry messaging conventions), on the
/// global meter provider's `taskbroker` meter: nothing without an installed SDK.
fn sent_messages(queue: &str, n: usize) {
    opentelemetry::global::meter("taskbroker")
        .u64_counter("messaging.client.sent.messages")
        .with_unit("{message}")
        .build()
        .add(
            n as u64,
            &[
                opentelemetry::KeyValue::new("messaging.system", "taskbroker"),
                opentelemetry::KeyValue::new("messaging.operation.name", "submit"),
                opentelemetry::KeyValue::new("messaging.destination.name", queue.to_string()),
            ],
        );
}
