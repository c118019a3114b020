//! Logs and traces. Logs go to stderr (text or JSON) filtered by `RUST_LOG`.
//! When `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) is set, spans are
//! also exported over OTLP/gRPC; the other standard `OTEL_*` variables (service
//! name, resource attributes, headers, sampler) apply as the OpenTelemetry SDK
//! reads them. Trace context crosses the queue as a W3C `traceparent` stored in
//! the task's metadata.

use std::collections::HashMap;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The task metadata key (and gRPC header) that carries trace context.
pub const TRACEPARENT: &str = "traceparent";

/// Flushes exported spans when the broker stops.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Flushes and stops the span exporter.
    pub fn shutdown(self) {
        if let Some(p) = self.provider
            && let Err(e) = p.shutdown()
        {
            eprintln!("taskbroker: flushing traces failed: {e}");
        }
    }
}

fn otlp_configured() -> bool {
    [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|k| std::env::var(k).is_ok_and(|v| !v.is_empty()))
        && std::env::var("OTEL_SDK_DISABLED").map_or(true, |v| v != "true")
}

/// A tracer provider exporting over OTLP/gRPC to `endpoint`, or to the endpoint
/// the `OTEL_*` variables configure.
pub fn otlp_provider(
    service_name: &str,
    endpoint: Option<&str>,
) -> Result<SdkTracerProvider, String> {
    use opentelemetry_otlp::WithExportConfig;
    let mut builder = opentelemetry_otlp::SpanExporter::builder().with_tonic();
    if let Some(e) = endpoint {
        builder = builder.with_endpoint(e);
    }
    let exporter = builder.build().map_err(|e| format!("OTLP exporter: {e}"))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(
            std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| service_name.to_string()),
        )
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// The tracing layer that turns spans into OpenTelemetry spans of `provider`.
pub fn otel_layer<S>(provider: &SdkTracerProvider) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_opentelemetry::layer().with_tracer(provider.tracer("taskbroker"))
}

/// Installs the global subscriber: logs, plus OTLP traces when configured.
pub fn init(log_format: &str) -> Result<Telemetry, String> {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let fmt = if log_format == "json" {
        fmt.json().boxed()
    } else {
        fmt.boxed()
    };
    let provider = if otlp_configured() {
        Some(otlp_provider("taskbroker", None)?)
    } else {
        None
    };
    let otel = provider.as_ref().map(otel_layer);
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(otel)
        .try_init()
        .map_err(|e| format!("cannot install the log subscriber: {e}"))?;
    Ok(Telemetry { provider })
}

struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

struct Map<'a>(&'a mut HashMap<String, String>);

impl Injector for Map<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_string(), value);
    }
}

/// The trace context a caller sent in its gRPC headers.
pub fn parent_from_headers(headers: &http::HeaderMap) -> opentelemetry::Context {
    TraceContextPropagator::new().extract(&Headers(headers))
}

/// The W3C traceparent of `span`, if tracing is exporting (else `None`).
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    use opentelemetry::trace::TraceContextExt;
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut map = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut Map(&mut map));
    map.remove(TRACEPARENT)
}
