//! The `trace_propagation` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::Duration;

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use taskbroker_client::{Client, TaskContext, TaskError, TaskSpec};
use tokio::sync::oneshot;

use crate::spec::worker;
use crate::{Outcome, at, check};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

pub(crate) async fn trace_propagation(c: Client, q: String) -> Outcome {
    let sc = SpanContext::new(
        TraceId::from_hex(TRACE_ID).map_err(|e| e.to_string())?,
        SpanId::from_hex("00f067aa0ba902b7").map_err(|e| e.to_string())?,
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    let cx = opentelemetry::Context::new().with_remote_span_context(sc);
    let submit = opentelemetry::context::FutureExt::with_context(
        c.submit(TaskSpec::new(q.clone(), Vec::new())),
        cx,
    );
    let id = at("Submit", submit.await)?.task_id;
    let task = at("GetTask", c.get_task(&id).await)?;
    let tp = task.metadata.get("traceparent").cloned();
    check(
        tp.as_deref() == Some(TRACEPARENT),
        format!("metadata traceparent {tp:?}, want {TRACEPARENT}"),
    )?;
    let (tx, rx) = tokio::sync::mpsc::channel::<String>(1);
    let w = worker(&c, &q)
        .queue(q.clone(), move |_ctx: TaskContext| {
            let tx = tx.clone();
            async move {
                let cx = opentelemetry::Context::current();
                let id = cx.span().span_context().trace_id().to_string();
                let _ = tx.send(id).await;
                Ok::<_, TaskError>(())
            }
        })
        .build();
    let (stop, stopped) = oneshot::channel::<()>();
    let run = tokio::spawn(w.run(async {
        let _ = stopped.await;
    }));
    let mut rx = rx;
    let got = tokio::time::timeout(Duration::from_secs(20), rx.recv()).await;
    let _ = stop.send(());
    let _ = run.await;
    let got = got.map_err(|_| "the handler never ran".to_string())?;
    check(
        got.as_deref() == Some(TRACE_ID),
        format!("handler saw trace id {got:?}, want {TRACE_ID}"),
    )
}
