//! `dependency_results`, `keys_and_replace`, `submit_backpressure` and `dead_result` of the
//! scenario.
//!
//! `dependency_results` runs the Worker, whose handler reads its dependency's
//! result on its `TaskContext`; `keys_and_replace` drives `Client::submit` with a
//! dependency on a key and a replace by key; `submit_backpressure` drives `Client::submit`,
//! whose resend after a full queue's RetryInfo it checks, and notices the first
//! refusal from the client's own log event; `dead_result` waits for a task whose handler
//! failed for good.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use taskbroker_client::pb::{self, TaskState};
use taskbroker_client::time::to_proto_duration;
use taskbroker_client::{Client, TaskContext, TaskError, TaskSpec, Worker};
use tokio::sync::Notify;
use tonic_types::StatusExt;
use tracing::instrument::WithSubscriber;
use tracing_subscriber::layer::SubscriberExt;

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

async fn complete(c: &Client, t: &pb::LeasedTask, result: &[u8]) -> Outcome {
    let req = pb::CompleteRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
        result: result.to_vec(),
        lease_next: None,
    };
    at("Complete", c.complete(req).await).map(|_| ())
}

/// A task's dependency results, by task id.
type Results = HashMap<String, Vec<u8>>;

pub async fn dependency_results(c: Client, q: String) -> Outcome {
    let a = at("Submit a", c.submit(TaskSpec::new(q.clone(), "a")).await)?.task_id;
    let b = at(
        "Submit b",
        c.submit(TaskSpec::new(q.clone(), "b").depends_on(a.clone()))
            .await,
    )?
    .task_id;
    let seen: Arc<Mutex<Option<Results>>> = Arc::default();
    let (recorded, dep) = (seen.clone(), a.clone());
    let w = Worker::builder(c.clone())
        .worker_id(WORKER_ID)
        .lease_wait(Duration::from_secs(1))
        .queue(&q, move |ctx: TaskContext| {
            let (recorded, dep) = (recorded.clone(), dep.clone());
            async move {
                if ctx.task_id() == dep {
                    return Ok::<_, TaskError>(b"a-result".to_vec());
                }
                let results = ctx.dependency_results().clone();
                *recorded.lock().unwrap() = Some(results.clone());
                Ok(results.get(&dep).cloned().unwrap_or_default())
            }
        })
        .build();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(w.run(async move {
        let _ = stopped.await;
    }));
    let waited = c.wait(&b, Duration::from_secs(20)).await;
    let _ = stop.send(());
    let ran = running.await.map_err(|e| e.to_string())?;
    at("wait b", waited)?;
    at("Worker::run", ran)?;
    let seen = seen.lock().unwrap().clone().unwrap_or_default();
    check(
        seen.len() == 1 && seen.get(&a).map(Vec::as_slice) == Some(b"a-result".as_slice()),
        format!("b's handler saw dependency_results {seen:?}, want {{{a}: a-result}}"),
    )?;
    let tb = at("GetTask", c.get_task(&b).await)?;
    check(
        tb.state() == TaskState::Succeeded && tb.result == b"a-result",
        format!(
            "b is {:?} with result {:?}, want SUCCEEDED with a-result",
            tb.state(),
            String::from_utf8_lossy(&tb.result)
        ),
    )
}

/// A task's state and payload as one line of a failure.
fn describe(t: &pb::Task) -> String {
    format!(
        "{:?} with payload {:?}",
        t.state(),
        String::from_utf8_lossy(&t.payload)
    )
}

pub async fn keys_and_replace(c: Client, q: String) -> Outcome {
    let b = at(
        "Submit b",
        c.submit(TaskSpec::new(q.clone(), "b").depends_on_key(q.clone(), "k-a"))
            .await,
    )?
    .task_id;
    let tb = at("GetTask b", c.get_task(&b).await)?;
    check(
        tb.state() == TaskState::Blocked,
        format!("b is {}, want BLOCKED", describe(&tb)),
    )?;
    let hour = Duration::from_secs(3600);
    let first = at(
        "Submit digest v1",
        c.submit(
            TaskSpec::new(q.clone(), "v1")
                .key("digest")
                .run_at(SystemTime::now() + hour),
        )
        .await,
    )?;
    let second = at(
        "Submit digest v2",
        c.submit(
            TaskSpec::new(q.clone(), "v2")
                .key("digest")
                .run_at(SystemTime::now())
                .replace_waiting(),
        )
        .await,
    )?;
    check(
        second.task_id == first.task_id && second.deduplicated && second.replaced,
        format!(
            "the second submit of digest answered {} (deduplicated {}, replaced {}), \
             want {} with both true",
            second.task_id, second.deduplicated, second.replaced, first.task_id
        ),
    )?;
    let d = first.task_id;
    let a = at(
        "Submit a",
        c.submit(TaskSpec::new(q.clone(), "a").key("k-a")).await,
    )?
    .task_id;
    let got = crate::lease(&c, &q, 10, Duration::from_secs(30), Duration::ZERO).await?;
    let mut ids: Vec<&str> = got.iter().map(|t| t.task_id.as_str()).collect();
    ids.sort_unstable();
    let mut want = vec![a.as_str(), d.as_str()];
    want.sort_unstable();
    check(
        ids == want,
        format!("the first Lease returned {ids:?}, want exactly a {a} and d {d}"),
    )?;
    for t in &got {
        if t.task_id == d {
            check(
                t.payload == b"v2",
                format!(
                    "d was leased with payload {:?}, want v2",
                    String::from_utf8_lossy(&t.payload)
                ),
            )?;
            complete(&c, t, b"").await?;
        } else {
            complete(&c, t, b"a-result").await?;
        }
    }
    let tb = at("GetTask b", c.get_task(&b).await)?;
    check(
        tb.state() == TaskState::Ready,
        format!("after a's Complete b is {}, want READY", describe(&tb)),
    )?;
    let got = crate::lease(&c, &q, 10, Duration::from_secs(30), Duration::from_secs(5)).await?;
    check(
        got.len() == 1 && got[0].task_id == b,
        format!(
            "the second Lease returned {} tasks, want exactly b",
            got.len()
        ),
    )?;
    let results = &got[0].dependency_results;
    check(
        results.len() == 1 && results.get(&a).map(Vec::as_slice) == Some(b"a-result".as_slice()),
        format!("b was leased with dependency_results {results:?}, want {{{a}: a-result}}"),
    )?;
    complete(&c, &got[0], b"").await
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

pub async fn submit_backpressure(c: Client, q: String) -> Outcome {
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

/// `dead_result`: a handler that fails for good; waiting for its task, and the typed
/// `submit_and_wait_json`, give `Error::TaskFailed` with the id, DEAD and its message.
pub async fn dead_result(c: Client, q: String) -> Outcome {
    let d = at(
        "Submit d",
        c.submit(TaskSpec::new(q.clone(), "order-7")).await,
    )?
    .task_id;
    let w = Worker::builder(c.clone())
        .worker_id(WORKER_ID)
        .lease_wait(Duration::from_secs(1))
        .queue(&q, |_ctx: TaskContext| async move {
            Err::<Vec<u8>, _>(TaskError::permanent("no such order"))
        })
        .build();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(w.run(async move {
        let _ = stopped.await;
    }));
    let waited = c.wait(&d, Duration::from_secs(20)).await;
    let typed = c
        .submit_and_wait_json::<_, String>(q.clone(), "order-8", Duration::from_secs(20))
        .await;
    let _ = stop.send(());
    let ran = running.await.map_err(|e| e.to_string())?;
    at("Worker::run", ran)?;
    let failed = |what: &str, r: Result<String, taskbroker_client::Error>| match r {
        Err(taskbroker_client::Error::TaskFailed {
            task_id,
            state,
            error,
        }) => Ok((task_id, state, error)),
        other => Err(format!("{what} gave {other:?}, want Error::TaskFailed")),
    };
    let (id, state, error) = failed("wait", waited.map(|_| String::new()))?;
    check(
        id == d && state == TaskState::Dead && error == "no such order",
        format!(
            "wait: TaskFailed {{ {id}, {state:?}, {error:?} }}, want {{ {d}, Dead, \"no such order\" }}"
        ),
    )?;
    let (id, state, error) = failed("submit_and_wait_json", typed)?;
    check(
        !id.is_empty() && id != d && state == TaskState::Dead && error == "no such order",
        format!(
            "submit_and_wait_json: TaskFailed {{ {id:?}, {state:?}, {error:?} }}, want a new task, Dead, \"no such order\""
        ),
    )
}
