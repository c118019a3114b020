//! The runtime's own metrics, through the OpenTelemetry metrics API
//! (docs/client-spec.md, "Middleware and metrics"). The instruments come from the
//! meter given to [`WorkerBuilder::meter`](super::WorkerBuilder::meter), or from the
//! global meter provider's `taskbroker` meter: without an installed SDK they record
//! nothing and cost next to nothing.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter};

/// What an attempt came to, as the `outcome` attribute says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Succeeded,
    Failed,
    LeaseLost,
    Cancelled,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Succeeded => "succeeded",
            Kind::Failed => "failed",
            Kind::LeaseLost => "lease_lost",
            Kind::Cancelled => "cancelled",
        }
    }
}

/// The settle calls a runtime sends, as the `rpc` attribute names them.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Rpc {
    Complete,
    CompleteMany,
    Fail,
}

#[derive(Clone)]
pub(crate) struct Metrics {
    consumed: Counter<u64>,
    process_duration: Histogram<f64>,
    tasks: Counter<u64>,
    duration: Histogram<f64>,
    leases_lost: Counter<u64>,
    settle_retries: Counter<u64>,
    settle_calls: Counter<u64>,
}

impl Metrics {
    pub(crate) fn new(meter: &Meter) -> Self {
        Metrics {
            // The OpenTelemetry messaging conventions' names, beside the runtime's own.
            consumed: meter
                .u64_counter("messaging.client.consumed.messages")
                .with_unit("{message}")
                .with_description("Tasks delivered to a handler")
                .build(),
            process_duration: meter
                .f64_histogram("messaging.process.duration")
                .with_unit("s")
                .with_description("How long each attempt's handler ran")
                .build(),
            tasks: meter
                .u64_counter("taskbroker.worker.tasks")
                .with_description("Task attempts run by this worker, by queue and outcome")
                .build(),
            duration: meter
                .f64_histogram("taskbroker.worker.task.duration")
                .with_unit("s")
                .with_description("How long each attempt's handler ran")
                .build(),
            leases_lost: meter
                .u64_counter("taskbroker.worker.leases.lost")
                .with_description("Attempts whose lease was lost before they settled")
                .build(),
            settle_retries: meter
                .u64_counter("taskbroker.worker.settle.retries")
                .with_description("Settle calls tried again after a transient failure")
                .build(),
            settle_calls: meter
                .u64_counter("taskbroker.worker.settle.calls")
                .with_description("Settle calls sent: Complete, CompleteMany and Fail")
                .build(),
        }
    }

    pub(crate) fn task(&self, queue: &str, kind: Kind, seconds: f64) {
        let attrs = [
            KeyValue::new("queue", queue.to_string()),
            KeyValue::new("outcome", kind.as_str()),
        ];
        self.tasks.add(1, &attrs);
        self.duration.record(seconds, &attrs);
        let mut conventional = vec![
            KeyValue::new("messaging.system", "taskbroker"),
            KeyValue::new("messaging.operation.name", "process"),
            KeyValue::new("messaging.destination.name", queue.to_string()),
        ];
        if kind != Kind::Succeeded {
            conventional.push(KeyValue::new("error.type", kind.as_str()));
        }
        self.consumed.add(1, &conventional);
        self.process_duration.record(seconds, &conventional);
        if kind == Kind::LeaseLost {
            self.leases_lost
                .add(1, &[KeyValue::new("queue", queue.to_string())]);
        }
    }

    pub(crate) fn settle_retry(&self, queue: &str) {
        self.settle_retries
            .add(1, &[KeyValue::new("queue", queue.to_string())]);
    }

    pub(crate) fn settle_call(&self, rpc: Rpc) {
        let name = match rpc {
            Rpc::Complete => "Complete",
            Rpc::CompleteMany => "CompleteMany",
            Rpc::Fail => "Fail",
        };
        self.settle_calls.add(1, &[KeyValue::new("rpc", name)]);
    }
}
