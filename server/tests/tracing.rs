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
    async fn handle(_ctx: TaskContext) -> Result<(), TaskError> {
        Ok(())
    }
    let worker = Worker::builder(client.clone())
        .queue("traced", handle)
        .concurrency(1)
        .build();
    let mut events = worker.subscribe();
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    let finished = async {
        loop {
            match events.recv().await.unwrap() {
                WorkerEvent::Finished { task_id, .. } if task_id == submitted.task_id => break,
                _ => {}
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
    let process = find("process traced");
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
    let id_attr = process
        .attributes
        .iter()
        .find(|a| a.key == "messaging.message.id")
        .and_then(|a| a.value.as_ref())
        .map(|v| format!("{:?}", v.value));
    assert!(id_attr.unwrap().contains(&submitted.task_id));
}

fn names(spans: &[Span]) -> Vec<&str> {
    spans.iter().map(|s| s.name.as_str()).collect()
}
