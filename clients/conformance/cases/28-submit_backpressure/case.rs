//! The `submit_backpressure` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::sync::Arc;
use std::time::Duration;

use taskbroker_client::pb;
use taskbroker_client::time::to_proto_duration;
use taskbroker_client::{Client, TaskSpec};
use tokio::sync::Notify;
use tonic_types::StatusExt;
use tracing::instrument::WithSubscriber;
use tracing_subscriber::layer::SubscriberExt;

use crate::results::complete;
use crate::{Outcome, WORKER_ID, at, check};

async fn lease(c: &Client, queue: &str, wait: Duration) -> Result<Vec<pb::LeasedTask>, String> {
    let req = pb::LeaseRequest {
        worker_id: WORKER_ID.into(),
        queues: vec![queue.into()],
        max_tasks: 1,
        lease_duration: Some(to_proto_duration(Duration::from_secs(30))),
        wait: Some(to_proto_duration(wait)),
        labels: Default::default(),
    };
    at("Lease", c.lease(req).await)
}

/// Wakes `refused` when the client logs that a full queue refused its Submit.
struct Refusals {
    refused: Arc<Notify>,
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Refusals {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message(bool);
        impl tracing::field::Visit for Message {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "message" && value.starts_with("submit refused by a full queue")
                {
                    self.0 = true;
                }
            }
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message"
                    && format!("{value:?}").starts_with("submit refused by a full queue")
                {
                    self.0 = true;
                }
            }
        }
        let mut m = Message(false);
        event.record(&mut m);
        if m.0 {
            self.refused.notify_one();
        }
    }
}

/// `msg` as a request carrying the scenario's token (`TASKBROKER_TOKEN`, set in the
/// secure run), as the client's own calls do: the raw stubs send none by themselves.
fn authed<T>(msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    if let Ok(token) = std::env::var("TASKBROKER_TOKEN")
        && let Ok(v) = format!("Bearer {token}").parse()
    {
        r.metadata_mut().insert("authorization", v);
    }
    r
}

pub(crate) async fn submit_backpressure(c: Client, q: String) -> Outcome {
    let update = pb::UpdateQueueRequest {
        name: q.clone(),
        config: Some(pb::QueueConfig {
            max_pending: 1,
            ..Default::default()
        }),
        update_mask: Some(prost_types::FieldMask {
            paths: vec!["max_pending".into()],
        }),
    };
    c.admin_stub()
        .update_queue(authed(update))
        .await
        .map_err(|s| format!("UpdateQueue: {s}"))?;
    at("Submit 1", c.submit(TaskSpec::new(q.clone(), "1")).await)?;
    let raw = c
        .broker_stub()
        .submit(authed(pb::SubmitRequest {
            tasks: vec![TaskSpec::new(q.clone(), "2").into_proto()],
        }))
        .await;
    let status = match raw {
        Ok(_) => {
            return Err("Submit 2 over max_pending answered OK, want RESOURCE_EXHAUSTED".into());
        }
        Err(s) => s,
    };
    check(
        status.code() == tonic::Code::ResourceExhausted,
        format!(
            "Submit 2 over max_pending answered {:?}, want RESOURCE_EXHAUSTED",
            status.code()
        ),
    )?;
    let retry = status.get_details_retry_info().is_some();
    let quota = status.get_details_quota_failure().is_some();
    check(
        retry && quota,
        format!("RESOURCE_EXHAUSTED details: RetryInfo {retry}, QuotaFailure {quota}; want both"),
    )?;
    let listed = c
        .admin_stub()
        .list_tasks(authed(pb::ListTasksRequest {
            queue: q.clone(),
            ..Default::default()
        }))
        .await
        .map_err(|s| format!("ListTasks: {s}"))?
        .into_inner()
        .tasks
        .len();
    check(
        listed == 1,
        format!("the refused Submit left {listed} tasks, want 1"),
    )?;

    let refused = Arc::new(Notify::new());
    let subscriber = tracing_subscriber::registry().with(Refusals {
        refused: refused.clone(),
    });
    let helper = c.clone();
    let spec = TaskSpec::new(q.clone(), "2");
    let mut submitted =
        tokio::spawn(async move { helper.submit(spec).await }.with_subscriber(subscriber));
    tokio::select! {
        _ = refused.notified() => {}
        r = &mut submitted => {
            return Err(format!("the client's submit returned ({}) before any refusal",
                match r { Ok(Ok(_)) => "OK".to_string(), Ok(Err(e)) => e.to_string(), Err(e) => e.to_string() }));
        }
        _ = tokio::time::sleep(Duration::from_secs(10)) => {
            return Err("the client's submit was not refused within 10 s".into());
        }
    }
    let got = lease(&c, &q, Duration::ZERO).await?;
    check(
        got.len() == 1 && got[0].payload == b"1",
        format!("Lease returned {} tasks, want task 1", got.len()),
    )?;
    complete(&c, &got[0], b"").await?;
    let second = at(
        "the client's submit of task 2",
        submitted.await.map_err(|e| format!("join: {e}"))?,
    )?;
    let t2 = at("GetTask", c.get_task(&second.task_id).await)?;
    check(
        t2.payload == b"2",
        format!(
            "task 2 has payload {:?}",
            String::from_utf8_lossy(&t2.payload)
        ),
    )
}
