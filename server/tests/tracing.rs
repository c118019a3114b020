//! Trace context crosses the queue: a producer's `send`, the broker's spans and
//! the worker's `process` span share one trace, proven with a real OTLP exporter
//! sending to an in-process OTLP/gRPC receiver.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use taskbroker_client::{Client, TaskContext, TaskError, TaskSpec, Worker, WorkerEvent};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Span>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for rs in request.into_inner().resource_spans {
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_broker_and_worker_spans_share_one_trace() {
    // The OTLP receiver.
    let receiver = Receiver::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(receiver.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    // The broker's own telemetry setup, exporting there.
    let provider =
        taskbroker_server::telemetry::otlp_provider("taskbroker-test", Some(&endpoint)).unwrap();
    tracing_subscriber::registry()
        .with(tracing_subscriber::EnvFilter::new("info"))
        .with(taskbroker_server::telemetry::otel_layer(&provider))
        .init();

    let app = spawn_app(Backend::Sqlite).await.unwrap();
    let client = Client::connect(app.url()).await.unwrap();
    // The producer: a request span of its own, then Submit.
    let checkout = tracing::info_span!("checkout");
    let submitted = tracing::Instrument::instrument(
        client.submit(TaskSpec::new("traced", b"x".to_vec())),
        checkout.clone(),
    )
    .await
    .unwrap();

    // The worker runs the task.
    async fn handle(ctx: TaskContext) -> Result<(), TaskError> {
        if ctx.payload() == b"fail" {
            return Err(TaskError::permanent("the partner refused it"));
        }
        Ok(())
    }
    let failing = client
        .submit(TaskSpec::new("traced", b"fail".to_vec()))
        .await
        .unwrap();
    let worker = Worker::builder(client.clone())
        .queue("traced", handle)
        .concurrency(1)
        .build();
    let mut events = worker.subscribe();
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    let finished = async {
        let mut left = [submitted.task_id.clone(), failing.task_id.clone()].to_vec();
        while !left.is_empty() {
            if let WorkerEvent::Finished { task_id, .. } = events.recv().await.unwrap() {
                left.retain(|id| *id != task_id);
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), finished)
        .await
        .expect("the traced task finished");
    stop.cancel();
    running.await.unwrap().unwrap();
    drop(checkout);
    provider.force_flush().unwrap();

    let spans = receiver.spans.lock().unwrap().clone();
    let find = |name: &str| {
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no span {name:?} in {:?}", names(&spans)))
            .clone()
    };
    let root = find("checkout");
    let send = find("send traced");
    let create = find("create traced");
    let of_task = |name: &str, id: &str| {
        spans
            .iter()
            .find(|s| s.name == name && attr(s, "messaging.message.id") == id)
            .unwrap_or_else(|| panic!("no {name:?} span of {id} in {:?}", names(&spans)))
            .clone()
    };
    let process = of_task("process traced", &submitted.task_id);
    for s in [&send, &create, &process] {
        assert_eq!(
            s.trace_id, root.trace_id,
            "{} is in the producer's trace",
            s.name
        );
    }
    assert_eq!(send.parent_span_id, root.span_id);
    assert_eq!(
        process.parent_span_id, create.span_id,
        "process continues the stored context"
    );
    assert_eq!(
        process.links.len(),
        1,
        "process links to the creation context"
    );
    assert_eq!(process.links[0].span_id, create.span_id);
    assert_eq!(process.links[0].trace_id, create.trace_id);

    // The broker's Lease and Complete: `receive` and `settle` spans.
    let receive = of_task("receive traced", &submitted.task_id);
    let settle = of_task("complete", &submitted.task_id);
    // Span kinds: 2 server, 3 client, 4 producer, 5 consumer.
    for (span, kind, operation, name) in [
        (&send, 4, "send", "submit"),
        (&create, 4, "create", "submit"),
        (&receive, 3, "receive", "lease"),
        (&process, 5, "process", "process"),
        (&settle, 3, "settle", "complete"),
    ] {
        assert_eq!(span.kind, kind, "{} kind", span.name);
        assert_eq!(
            attr(span, "messaging.system"),
            "taskbroker",
            "{}",
            span.name
        );
        assert_eq!(
            attr(span, "messaging.operation.type"),
            operation,
            "{}",
            span.name
        );
        assert_eq!(
            attr(span, "messaging.operation.name"),
            name,
            "{}",
            span.name
        );
    }
    for span in [&send, &create, &receive, &process] {
        assert_eq!(
            attr(span, "messaging.destination.name"),
            "traced",
            "{}",
            span.name
        );
    }
    for span in [&send, &create, &receive, &process, &settle] {
        assert_eq!(
            attr(span, "messaging.message.id"),
            submitted.task_id,
            "{} names the task",
            span.name
        );
    }
    assert_eq!(attr(&send, "messaging.batch.message_count"), "1");
    assert_eq!(attr(&receive, "messaging.batch.message_count"), "1");
    assert_eq!(
        process.status.as_ref().map_or(0, |s| s.code),
        0,
        "a success is unset"
    );

    // A handler's failure: the process span's status and error type; its Fail a settle.
    let failed = of_task("process traced", &failing.task_id);
    let status = failed.status.clone().expect("a status");
    assert_eq!(status.code, 2, "ERROR");
    assert_eq!(status.message, "the partner refused it");
    assert_eq!(attr(&failed, "error.type"), "permanent");
    let fail = of_task("fail", &failing.task_id);
    assert_eq!(attr(&fail, "messaging.operation.type"), "settle");
}

/// An attribute's value as text ("" when the span has none).
fn attr(span: &Span, key: &str) -> String {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    match span
        .attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref())
        .and_then(|v| v.value.as_ref())
    {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn names(spans: &[Span]) -> Vec<&str> {
    spans.iter().map(|s| s.name.as_str()).collect()
}
